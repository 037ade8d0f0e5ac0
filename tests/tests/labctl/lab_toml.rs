use super::*;

/// Each broken lab.toml, and what the message must name.
#[test]
fn bad_labs_exit_2_naming_file_and_field() {
    let cases: &[(&str, &[&str])] = &[
        ("name = \"x\"\nsetpu = 1\n", &["unknown field `setpu`"]),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \" \"\n",
            &["check `a`: run is empty"],
        ),
        (
            "name = \"x\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n[[checks]]\nname = \"a\"\nrun = \"true\"\n",
            &["check `a`: name is used by an earlier check"],
        ),
        (
            "name = \"x\"\n[setup]\ntimeout_secs = 0\n",
            &["setup.timeout_secs is 0", "from 1 to 3600"],
        ),
        (
            "name = \"x\"\n[setup]\nscript = \"setup.sh\"\n",
            &["setup.script names `setup.sh`", "not a file"],
        ),
        (
            "name = \"x\"\n[files]\nsource = \"files\"\n",
            &["files.source names `files`"],
        ),
        ("name = [\n", &["not valid lab.toml"]),
    ];
    let tf = TempDir::new("labctl-badlab-token");
    let token = tf.join("token");
    write_token(&token, &new_token());
    for (text, wants) in cases {
        let dir = lab_folder("labctl-badlab", text);
        let file = dir.join("lab.toml").display().to_string();
        let lab = dir.path.display().to_string();
        for args in [
            vec![
                "grade",
                &lab,
                "--url",
                "http://127.0.0.1:1",
                "--token-file",
                token.to_str().unwrap(),
            ],
            vec!["try", &lab, "--agent", agent_bin().to_str().unwrap()],
        ] {
            let out = labctl(&args);
            assert_eq!(out.status.code(), Some(2), "{text:?}: {}", describe(&out));
            let err = stderr(&out);
            assert!(err.starts_with("error: "), "{err}");
            assert!(err.contains(&format!("`{file}`")), "names the file: {err}");
            for want in *wants {
                assert!(err.contains(want), "{text:?}: {err} lacks {want:?}");
            }
            assert_eq!(stdout(&out), "");
        }
    }
}

#[test]
fn a_folder_without_lab_toml() {
    let dir = TempDir::new("labctl-nolab");
    let out = labctl(["try", dir.path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("lab.toml"), "{err}");
    assert!(
        err.contains("hint: a lab is a folder with a `lab.toml` in it"),
        "{err}"
    );
}
