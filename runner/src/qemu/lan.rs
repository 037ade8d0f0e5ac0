//! The private network of a session's guests ([`Lan`]): a second NIC on
//! each guest ([`LanNic`]), all joined by qemu's multicast datagram
//! backend on loopback, with static addresses and every VM's name in each
//! guest's `/etc/hosts`, as the sandbox session's switch gives them.
//!
//! ```text
//!  guest `server`  net0 (user, restrict=on) ── hostfwd 127.0.0.1:P0 → :8899
//!                  lan0 10.89.0.2/24 ──┐
//!                                      ├─ UDP 239.89.x.y:PORT on lo (qemu's `dgram`)
//!  guest `client`  lan0 10.89.0.3/24 ──┘
//!                  net0 (user, restrict=on) ── hostfwd 127.0.0.1:P1 → :8899
//! ```
//!
//! Why multicast on loopback: every qemu of the session joins one group
//! and each Ethernet frame one guest sends reaches all the others, so a
//! session of any size is one segment without a switch process (which
//! would have to outlive `labctl` for `--keep`), without root, a bridge
//! or a tap on the host. `dgram` unicast would join two guests only (a
//! point-to-point link per pair). The frames never leave the host: they
//! are sent from and to 127.0.0.1 (`local.host`) with a multicast TTL of 1
//! (Linux's default, which qemu keeps). Any process on this host could join the group and see or send
//! frames, as it can reach the user NIC's forwarded port: the agent's
//! token is what guards it either way (SECURITY.md's model).
//!
//! Sessions never mix: a session picks a random group in 239.89.0.0/16
//! (administratively scoped) and a random port, and takes no group some
//! socket on this host has already joined (`/proc/net/igmp`), so a
//! session never joins a live one's, kept sessions included. (Two sessions
//! starting in the same instant could still draw the same group *and*
//! port: one chance in 2^16 × 40000.)
//!
//! The guest side comes from the NoCloud seed, never from the lab's payload
//! (which stays byte for byte what `labctl secret` renders): a
//! `network-config` (v2: DHCP on the user NIC, the static address on the
//! session's, each matched by the MAC address given to qemu) and a
//! `vendor-data` script that adds the session's names to `/etc/hosts`
//! (cloud-init runs it once per instance in its final stage, before the
//! payload's `runcmd` starts the agent and the setup).

use std::net::Ipv4Addr;

/// The user NIC's MAC when a guest also has a session NIC: qemu's own
/// default for a first NIC, given explicitly so that `network-config` can
/// match it (the two NICs are the same model, so only the MAC tells them
/// apart).
pub const UPLINK_MAC: &str = "52:54:00:12:34:56";
/// The session's NIC in qemu (`-netdev` id).
const NETDEV_ID: &str = "lan0";
/// The range sessions draw their group from (239.89.0.0/16).
const GROUP_BASE: [u8; 2] = [239, 89];
/// The range of ports.
const PORTS: std::ops::Range<u16> = 20000..60000;

/// A session's segment: the multicast group and port its qemus join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lan {
    pub group: Ipv4Addr,
    pub port: u16,
}

impl Lan {
    /// A segment no socket on this host has joined (`/proc/net/igmp`),
    /// from `random` bytes; `None` when the random group is taken (draw
    /// again).
    pub fn pick(random: [u8; 4], igmp: &str) -> Option<Lan> {
        let group = Ipv4Addr::new(GROUP_BASE[0], GROUP_BASE[1], random[0], random[1]);
        let joined = joined_groups(igmp);
        if group.octets()[3] == 0 || joined.contains(&group) {
            return None;
        }
        let span = PORTS.end - PORTS.start;
        let port = PORTS.start + u16::from_le_bytes([random[2], random[3]]) % span;
        Some(Lan { group, port })
    }

    /// [`Lan::pick`] with the OS's randomness and this host's
    /// `/proc/net/igmp` (unreadable: nothing known to be joined).
    pub fn new() -> std::io::Result<Lan> {
        let igmp = std::fs::read_to_string("/proc/net/igmp").unwrap_or_default();
        loop {
            let mut random = [0u8; 4];
            getrandom::fill(&mut random).map_err(std::io::Error::other)?;
            if let Some(lan) = Lan::pick(random, &igmp) {
                return Ok(lan);
            }
        }
    }
}

/// The groups `/proc/net/igmp` lists as joined (on any device). A group is
/// 8 hex digits in the host's byte order, on a line of its own under its
/// device's line.
fn joined_groups(igmp: &str) -> Vec<Ipv4Addr> {
    igmp.lines()
        .filter_map(|line| {
            let first = line.split_whitespace().next()?;
            if !line.starts_with(char::is_whitespace) || first.len() != 8 {
                return None;
            }
            let raw = u32::from_str_radix(first, 16).ok()?;
            Some(Ipv4Addr::from(raw.to_ne_bytes()))
        })
        .collect()
}

/// One guest's NIC on a session's segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanNic {
    pub lan: Lan,
    /// Its MAC address, unique in the session ([`LanNic::mac_for`]).
    pub mac: String,
    /// Its address in the session's /24.
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl LanNic {
    /// The session NIC's MAC of the session's `i`-th VM: 52:54:00:89:HH:LL.
    pub fn mac_for(i: usize) -> String {
        let [hi, lo] = (i as u16).to_be_bytes();
        format!("52:54:00:89:{hi:02x}:{lo:02x}")
    }

    /// qemu's arguments for this NIC: the multicast backend on loopback and
    /// a virtio NIC without boot ROM (the firmware never boots from it).
    /// qemu binds the group's port and takes only the address of `local`
    /// (the interface that sends and joins), but its parser wants a port.
    pub fn qemu_args(&self) -> [String; 4] {
        let Lan { group, port } = self.lan;
        [
            "-netdev".into(),
            format!(
                "dgram,id={NETDEV_ID},remote.type=inet,remote.host={group},remote.port={port},\
                 local.type=inet,local.host=127.0.0.1,local.port=0"
            ),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev={NETDEV_ID},mac={},romfile=",
                self.mac
            ),
        ]
    }

    /// The seed's `network-config` (v2): DHCP on the user NIC, as
    /// cloud-init's fallback would have it, and this NIC's static address;
    /// each matched by its MAC (cloud-init finds the kernel's name for it).
    pub fn network_config(&self) -> String {
        format!(
            "version: 2\n\
             ethernets:\n\
             \x20 uplink:\n\
             \x20   match:\n\
             \x20     macaddress: \"{UPLINK_MAC}\"\n\
             \x20   dhcp4: true\n\
             \x20 session:\n\
             \x20   match:\n\
             \x20     macaddress: \"{}\"\n\
             \x20   addresses: [\"{}/{}\"]\n",
            self.mac, self.addr, self.prefix_len
        )
    }
}

/// The seed's `vendor-data`: a script that adds each of `hosts` (a VM's
/// name and address; names are `[[vms]]` names: a hostname's letters,
/// digits and `-`) to `/etc/hosts`, once.
pub fn hosts_script(hosts: &[(String, Ipv4Addr)]) -> String {
    const MARK: &str = "# lab-runner: the VMs of the session";
    let mut s = String::from(
        "#!/bin/sh\n\
         # lab-runner (a session under qemu): every VM's name on the session's network.\n\
         set -e\n",
    );
    s.push_str(&format!("grep -qxF '{MARK}' /etc/hosts && exit 0\n"));
    s.push_str("cat >>/etc/hosts <<'EOF'\n");
    s.push_str(MARK);
    s.push('\n');
    for (name, addr) in hosts {
        s.push_str(&format!("{addr}\t{name}\n"));
    }
    s.push_str("EOF\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const IGMP: &str = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
        1\tlo        :     2      V3\n\
        \t\t\t\t010000E0     1 0:00000000\t\t0\n\
        \t\t\t\t030259EF     1 0:00000000\t\t0\n\
        2\teth0      :     1      V3\n\
        \t\t\t\t010000E0     1 0:00000000\t\t0\n";

    #[test]
    fn joined_groups_are_read_from_proc() {
        assert_eq!(
            joined_groups(IGMP),
            [
                Ipv4Addr::new(224, 0, 0, 1),
                Ipv4Addr::new(239, 89, 2, 3),
                Ipv4Addr::new(224, 0, 0, 1)
            ]
        );
    }

    #[test]
    fn a_session_takes_a_free_group_and_a_port_in_range() {
        let lan = Lan::pick([7, 9, 0xff, 0xff], IGMP).unwrap();
        assert_eq!(lan.group, Ipv4Addr::new(239, 89, 7, 9));
        assert!(PORTS.contains(&lan.port), "{lan:?}");
        assert_eq!(lan.port, 20000 + 0xffff % 40000);
        // A live session's group (on lo above) is never taken, nor .0.
        assert_eq!(Lan::pick([2, 3, 0, 0], IGMP), None);
        assert_eq!(Lan::pick([2, 0, 0, 0], IGMP), None);
        let drawn = Lan::new().unwrap();
        assert_eq!(drawn.group.octets()[..2], GROUP_BASE);
    }

    fn nic(i: usize) -> LanNic {
        LanNic {
            lan: Lan {
                group: Ipv4Addr::new(239, 89, 7, 9),
                port: 40001,
            },
            mac: LanNic::mac_for(i),
            addr: Ipv4Addr::new(10, 89, 0, 2 + i as u8),
            prefix_len: 24,
        }
    }

    #[test]
    fn each_vm_has_its_mac_on_the_sessions_group() {
        assert_eq!(LanNic::mac_for(0), "52:54:00:89:00:00");
        assert_eq!(LanNic::mac_for(300), "52:54:00:89:01:2c");
        assert_eq!(
            nic(1).qemu_args(),
            [
                "-netdev",
                "dgram,id=lan0,remote.type=inet,remote.host=239.89.7.9,remote.port=40001,\
                 local.type=inet,local.host=127.0.0.1,local.port=0",
                "-device",
                "virtio-net-pci,netdev=lan0,mac=52:54:00:89:00:01,romfile="
            ]
        );
    }

    #[test]
    fn the_network_config_keeps_dhcp_on_the_uplink() {
        assert_eq!(
            nic(1).network_config(),
            "version: 2\n\
             ethernets:\n\
             \x20 uplink:\n\
             \x20   match:\n\
             \x20     macaddress: \"52:54:00:12:34:56\"\n\
             \x20   dhcp4: true\n\
             \x20 session:\n\
             \x20   match:\n\
             \x20     macaddress: \"52:54:00:89:00:01\"\n\
             \x20   addresses: [\"10.89.0.3/24\"]\n"
        );
    }

    #[test]
    fn the_hosts_script_adds_every_name_once() {
        let s = hosts_script(&[
            ("server".into(), Ipv4Addr::new(10, 89, 0, 2)),
            ("client".into(), Ipv4Addr::new(10, 89, 0, 3)),
        ]);
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(
            s.ends_with(
                "cat >>/etc/hosts <<'EOF'\n# lab-runner: the VMs of the session\n\
                 10.89.0.2\tserver\n10.89.0.3\tclient\nEOF\n"
            ),
            "{s}"
        );
        assert!(
            s.contains("grep -qxF '# lab-runner: the VMs of the session' /etc/hosts && exit 0"),
            "{s}"
        );
    }
}
