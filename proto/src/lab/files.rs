//! The lab's files (`[files].source`) as they will be shipped: walked,
//! checked, in a stable order.

use super::*;
use std::path::Path;

impl Lab {
    /// Every regular file under `[files].source`, sorted by path, with its
    /// permission bits. Symlinks and special files are refused: what they
    /// point to would differ between the author's machine and the guest.
    pub fn collect_files(&self) -> Result<Vec<LabFile>, LabError> {
        let Some(files) = &self.files else {
            return Ok(Vec::new());
        };
        let root = self.dir.join(&files.source);
        let mut out = Vec::new();
        walk(&root, "", &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<LabFile>) -> Result<(), LabError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LabError::Files { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(LabError::BadFile {
                path,
                problem: "file name is not UTF-8: rename it".into(),
            });
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            walk(&path, &rel, out)?;
        } else if ft.is_file() {
            let contents = std::fs::read(&path).map_err(io(&path))?;
            out.push(LabFile {
                path: rel,
                mode: meta.permissions().mode() & 0o7777,
                contents,
            });
        } else if ft.is_symlink() {
            return Err(LabError::BadFile {
                path,
                problem: "is a symlink: lab files must be regular files; copy the target instead"
                    .into(),
            });
        } else {
            return Err(LabError::BadFile {
                path,
                problem: "is not a regular file: lab files must be regular files".into(),
            });
        }
    }
    Ok(())
}
