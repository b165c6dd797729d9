//! Telling a dynamically linked executable from a static one by its ELF headers, without
//! running it: a Nix build sandbox holds no dynamic loader, so a builder must be static.

use std::io::Read;
use std::path::Path;

/// Whether `bytes` is a 64-bit little-endian ELF executable that names a program interpreter
/// (the dynamic loader). Anything else — a static ELF, another format — is let through: Nix
/// reports a builder it cannot run itself.
pub fn is_dynamic_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let field = |at: usize, len: usize| bytes.get(at..at.checked_add(len)?);
    let u16_at = |at| {
        field(at, 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    let u32_at = |at| {
        field(at, 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |at| {
        field(at, 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..usize::from(phnum)).any(|i| {
        usize::try_from(phoff)
            .ok()
            .and_then(|off| off.checked_add(i * usize::from(phentsize)))
            .and_then(u32_at)
            == Some(PT_INTERP)
    })
}

/// Whether the file at `path` is a dynamically linked ELF executable (see [`is_dynamic_elf`]);
/// reads only its headers.
pub fn is_dynamically_linked(path: &Path) -> std::io::Result<bool> {
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)?
        .take(4096)
        .read_to_end(&mut head)?;
    Ok(is_dynamic_elf(&head))
}
