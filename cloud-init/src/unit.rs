//! The agent's systemd unit as a lab VM receives it, and the serial
//! console's autologin drop-in: the two unit files the `#cloud-config` part
//! writes. The unit itself lives once, in `packaging/lab-agent.service`.

/// The systemd unit, one copy for the whole project: `packaging/` owns it.
pub const UNIT: &str = include_str!("../../packaging/lab-agent.service");

use crate::spec::Channel;

/// The unit as a lab VM gets it: [`UNIT`]'s settings, its comments (the
/// why of each setting, 1.2 KiB) replaced by a pointer to them, and
/// `lab-agent serve` listening on `channel`. The unit rides in the
/// cloud-config, which cloud-init parses on every boot.
pub fn guest_unit(channel: Channel) -> String {
    let mut out = String::from(
        "# lab-agent: readiness and grading endpoint of a lab VM, written by cloud-init.\n\
         # Why each setting: packaging/lab-agent.service in lab-agent's source.\n",
    );
    for line in UNIT.lines().filter(|l| !l.starts_with('#')) {
        out.push_str(line);
        if line == SERVE {
            for arg in channel.listen_args() {
                out.push(' ');
                out.push_str(&arg);
            }
        }
        out.push('\n');
    }
    out
}

/// The unit's command line, to which the channel's `--listen`s are added.
const SERVE: &str = "ExecStart=/usr/local/bin/lab-agent serve";

/// Replaces the getty's command line so that it logs root in at once. The
/// first, empty `ExecStart=` clears the packaged one (systemd appends
/// otherwise). The rest is Debian 12's own `serial-getty@.service` line plus
/// `-f` in the login options and `--autologin root`: with `-o`, agetty passes
/// exactly those options to login(1), so `-f` (no password) must be there.
/// `\\u` is systemd's escape for the `\u` agetty replaces with the user name.
pub const AUTOLOGIN_DROPIN: &str = "\
# lab-agent payload: no passwords in lab VMs; the web terminal is this console.
[Service]
ExecStart=
ExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --autologin root --keep-baud 115200,57600,38400,9600 - $TERM
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_unit_keeps_every_setting_in_order() {
        let settings = |u: &str| -> Vec<String> {
            u.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let guest = guest_unit(Channel::Tcp);
        assert_eq!(settings(&guest), settings(UNIT));
        assert!(settings(UNIT).contains(&SERVE.to_owned()));
        assert!(guest.len() < UNIT.len() / 2, "{}", guest.len());
        let both = guest_unit(Channel::Both);
        assert!(
            both.contains(&format!(
                "{SERVE} --listen 0.0.0.0:8899 --listen vsock:8899\n"
            )),
            "{both}"
        );
        let vsock = guest_unit(Channel::Vsock);
        assert!(
            vsock.contains(&format!("{SERVE} --listen vsock:8899\n")),
            "{vsock}"
        );
        assert_eq!(settings(&both).len(), settings(UNIT).len());
    }
}
