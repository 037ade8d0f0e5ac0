//! A session's network in the sandbox: one private switch that joins the
//! network namespaces of its VMs' sandboxes, as a session network joins
//! the VMs on a platform.
//!
//! ```text
//!  the switch's namespace (no process in it: `labctl` holds it open)
//!    br0 ── vm0 ═══ eth0 10.89.0.2/24   server's sandbox
//!        └─ vm1 ═══ eth0 10.89.0.3/24   client's sandbox
//! ```
//!
//! Nothing of it is in the host's namespace: the bridge and the switch's
//! ends of the veth pairs are made in a namespace of the switch's own,
//! each pair's other end straight in a VM's. A network namespace lives
//! while a process is in it or a descriptor holds it; the switch's is held
//! by [`Switch`] alone, the VMs' by their keepers, so when `labctl` ends,
//! however (`kill -9` too), the namespaces go and their interfaces with
//! them.
//!
//! The links are made by rtnetlink, a few messages written by hand (no
//! `ip` on the machine needed, no dependency for three message types).

use nix::libc;
use nix::sched::{CloneFlags, setns, unshare};
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The switch's bridge, in its own namespace.
const BRIDGE: &str = "br0";
/// Each VM's end of its pair, in its sandbox.
const VM_IF: &str = "eth0";
/// The session's subnet: private, and only ever inside the namespaces.
pub(crate) const PREFIX_LEN: u8 = 24;

/// The address of a session's `i`-th VM (10.89.0.2 onward).
pub(crate) fn vm_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 89, 0, 2 + i as u8)
}

/// The switch: its network namespace, with the bridge in it.
#[derive(Debug)]
pub(crate) struct Switch {
    netns: OwnedFd,
}

impl Switch {
    /// A fresh namespace with a bridge, up.
    pub(crate) fn new() -> io::Result<Switch> {
        on_thread(|| {
            unshare(CloneFlags::CLONE_NEWNET)?;
            let netns: OwnedFd = fs::File::open("/proc/thread-self/ns/net")?.into();
            let mut attrs = Vec::new();
            attr(&mut attrs, IFLA_IFNAME, &c_name(BRIDGE));
            nested(&mut attrs, IFLA_LINKINFO, |a| {
                attr(a, IFLA_INFO_KIND, b"bridge\0")
            });
            new_link(&attrs)?;
            set_link(BRIDGE, None)?;
            Ok(Switch { netns })
        })
    }

    /// Plugs the network namespace `vm` (a VM's sandbox) into port `i`:
    /// a veth pair, the switch's end `vmI` on the bridge, the VM's end
    /// `eth0` with `addr`, both up (and the VM's loopback).
    pub(crate) fn plug(&self, i: usize, vm: &fs::File, addr: Ipv4Addr) -> io::Result<()> {
        let port = format!("vm{i}");
        on_thread(|| {
            setns(&self.netns, CloneFlags::CLONE_NEWNET)?;
            let mut attrs = Vec::new();
            attr(&mut attrs, IFLA_IFNAME, &c_name(&port));
            nested(&mut attrs, IFLA_LINKINFO, |a| {
                attr(a, IFLA_INFO_KIND, b"veth\0");
                nested(a, IFLA_INFO_DATA, |a| {
                    nested(a, VETH_INFO_PEER, |a| {
                        a.extend_from_slice(&[0; IFINFOMSG_LEN]);
                        attr(a, IFLA_IFNAME, &c_name(VM_IF));
                        attr(a, IFLA_NET_NS_FD, &(vm.as_raw_fd() as u32).to_ne_bytes());
                    })
                })
            });
            new_link(&attrs)?;
            set_link(&port, Some(index(BRIDGE)?))
        })?;
        on_thread(|| {
            setns(vm, CloneFlags::CLONE_NEWNET)?;
            add_addr(VM_IF, addr, PREFIX_LEN)?;
            set_link(VM_IF, None)?;
            set_link("lo", None)
        })
    }
}

/// Runs `f` on a thread of its own: `setns` and `unshare` move the
/// calling thread for good, and no other thread of `labctl` may move.
fn on_thread<T: Send>(f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the network thread panicked")))
    })
}

// rtnetlink's numbers (`linux/rtnetlink.h`, `linux/if_link.h`,
// `linux/veth.h`, `linux/if_addr.h`).
const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFINFOMSG_LEN: usize = 16;
const NLA_F_NESTED: u16 = 0x8000;

fn c_name(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// Appends one attribute, padded to 4 bytes.
fn attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    buf.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

/// Appends an attribute holding what `f` appends.
fn nested(buf: &mut Vec<u8>, ty: u16, f: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    f(buf);
    let len = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    buf[start + 2..start + 4].copy_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
}

/// `struct ifinfomsg`: any family, the link `index` (0: a new one),
/// `flags` among `change`.
fn ifinfomsg(index: u32, flags: u32, change: u32) -> Vec<u8> {
    let mut m = vec![0u8; 4];
    m.extend_from_slice(&index.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&change.to_ne_bytes());
    m
}

fn new_link(attrs: &[u8]) -> io::Result<()> {
    let flags = (libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    request(libc::RTM_NEWLINK, flags, &ifinfomsg(0, 0, 0), attrs)
}

/// `ip link set NAME up [master M]`.
fn set_link(name: &str, master: Option<u32>) -> io::Result<()> {
    let up = libc::IFF_UP as u32;
    let mut attrs = Vec::new();
    if let Some(m) = master {
        attr(&mut attrs, IFLA_MASTER, &m.to_ne_bytes());
    }
    request(
        libc::RTM_NEWLINK,
        0,
        &ifinfomsg(index(name)?, up, up),
        &attrs,
    )
}

/// `ip addr add ADDR/PREFIX dev NAME`.
fn add_addr(name: &str, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
    // `struct ifaddrmsg`: family, prefix length, flags, scope, index.
    let mut msg = vec![libc::AF_INET as u8, prefix, 0, 0];
    msg.extend_from_slice(&index(name)?.to_ne_bytes());
    let mut attrs = Vec::new();
    attr(&mut attrs, IFA_LOCAL, &addr.octets());
    attr(&mut attrs, IFA_ADDRESS, &addr.octets());
    let flags = (libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    request(libc::RTM_NEWADDR, flags, &msg, &attrs)
}

fn index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid C string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::other(format!(
            "no network interface `{name}`: {}",
            io::Error::last_os_error()
        ))),
        i => Ok(i),
    }
}

/// Sends one rtnetlink request of `ty` with its fixed header `head` and
/// `attrs`, and reads the kernel's acknowledgement.
fn request(ty: u16, flags: u16, head: &[u8], attrs: &[u8]) -> io::Result<()> {
    // SAFETY: a plain socket call; the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = 16 + head.len() + attrs.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&ty.to_ne_bytes());
    msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16 | flags).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
    msg.extend_from_slice(head);
    msg.extend_from_slice(attrs);
    // SAFETY: `msg` is valid for its length; an unbound netlink socket
    // sends to the kernel.
    if unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut answer = [0u8; 4096];
    // SAFETY: `answer` is valid for its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // `struct nlmsghdr` then, for NLMSG_ERROR, `int error` (0: done).
    let n = n as usize;
    let ty = (n >= 6).then(|| u16::from_ne_bytes([answer[4], answer[5]]));
    if ty != Some(libc::NLMSG_ERROR as u16) || n < 20 {
        return Err(io::Error::other(
            "rtnetlink answered something else than an ack",
        ));
    }
    match i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}
