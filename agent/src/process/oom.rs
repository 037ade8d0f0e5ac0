//! The agent's own OOM protection, and the reset its children get.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when the agent's own `oom_score_adj` is not 0 (lowered by
/// [`protect_from_oom`], or inherited): every command's child then sets its
/// own back to 0 before exec. Not unconditionally: three system calls per
/// exec that a guest where the agent runs at 0 does not need.
pub(super) static OOM_RESET: AtomicBool = AtomicBool::new(false);

/// The agent's own `oom_score_adj`: -900. When the guest runs out of
/// memory the kernel kills the process with the highest badness (its share
/// of memory, shifted by this value in thousandths of the total): at -900
/// the agent, a few MiB, is never picked while a command holds more than
/// ~10 % less of the guest than it would need to outrank it — the hog goes
/// first. Not -1000 (never killed): an agent that itself leaked without
/// bound must still be killable, and systemd restarts it. Its children get
/// 0 back (in [`crate::process::spawn`]), or they would inherit the protection.
///
/// The agent is the one owner (not the unit's `OOMScoreAdjust=`): it runs
/// outside systemd too (`labctl try`, tests), and the lowering is only safe
/// paired with the reset that only the agent's spawn can do.
pub const AGENT_OOM_SCORE_ADJ: i32 = -900;

/// Lowers the agent's own `oom_score_adj`. Needs `CAP_SYS_RESOURCE`
/// (root); otherwise the error says what is not protected. Either way the
/// commands start at 0 if the agent is not at 0.
pub fn protect_from_oom() -> io::Result<()> {
    const FILE: &str = "/proc/self/oom_score_adj";
    let lowered = std::fs::write(FILE, AGENT_OOM_SCORE_ADJ.to_string());
    let own = std::fs::read_to_string(FILE).unwrap_or_default();
    OOM_RESET.store(own.trim() != "0", Ordering::Relaxed);
    lowered
}
