//! Fake agents: ELF images for tests that need an "agent" file without
//! building one.

/// A minimal ELF64 x86_64 executable image, for tests that need an "agent"
/// without building one: one `PT_LOAD` header, plus `PT_INTERP` when
/// `dynamic`, followed by `payload`. It passes `agent_bin::check` (or fails it as
/// dynamic) but is not meant to run.
pub fn fake_elf(dynamic: bool, payload: &[u8]) -> Vec<u8> {
    let phnum: u16 = if dynamic { 2 } else { 1 };
    let mut b = Vec::new();
    b.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b.extend_from_slice(&62u16.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    b.extend_from_slice(&0x40_0078u64.to_le_bytes()); // entry
    b.extend_from_slice(&64u64.to_le_bytes()); // phoff
    b.extend_from_slice(&0u64.to_le_bytes()); // shoff
    b.extend_from_slice(&0u32.to_le_bytes()); // flags
    b.extend_from_slice(&64u16.to_le_bytes()); // ehsize
    b.extend_from_slice(&56u16.to_le_bytes()); // phentsize
    b.extend_from_slice(&phnum.to_le_bytes());
    b.extend_from_slice(&[0; 6]); // shentsize, shnum, shstrndx
    let mut phdr = |p_type: u32| {
        b.extend_from_slice(&p_type.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes()); // R+X
        b.extend_from_slice(&[0; 48]);
    };
    phdr(1); // PT_LOAD
    if dynamic {
        phdr(3); // PT_INTERP
    }
    b.extend_from_slice(payload);
    b
}
