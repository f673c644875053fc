//! The BPF_PROG_TYPE_CGROUP_DEVICE program for an [`Emulator`] state, built
//! by hand as runc, crun and systemd build theirs:
//!
//! ```text
//! r2 = ctx->access_type & 0xffff   type (BPF_DEVCG_DEV_*)
//! r3 = ctx->access_type >> 16      requested access (BPF_DEVCG_ACC_*)
//! r4 = ctx->major
//! r5 = ctx->minor
//! per exception:
//!   if w2 != type goto next
//!   [w1 = w3; w1 &= access; if w1 != w3 goto next]   unless access is rwm
//!   [if w4 != major goto next]                         unless major is *
//!   [if w5 != minor goto next]                         unless minor is *
//!   r0 = !default; exit
//! next: ...
//! r0 = default; exit
//! ```
//!
//! Every exception has the same action (the opposite of the default), so
//! their order does not matter.

use super::{acc, dev, Emulator, Kind};
use crate::bpf::Insn;

const CTX: u8 = 1;
const TMP: u8 = 1;
const TYPE: u8 = 2;
const ACCESS: u8 = 3;
const MAJOR: u8 = 4;
const MINOR: u8 = 5;

/// The filter for `emu`: returns 1 (allow) or 0 (deny, the caller gets EPERM).
pub(crate) fn program(emu: &Emulator) -> Vec<Insn> {
    let mut p = vec![
        Insn::load_u32(TYPE, CTX, 0),
        Insn::and32_imm(TYPE, 0xffff),
        Insn::load_u32(ACCESS, CTX, 0),
        Insn::rsh32_imm(ACCESS, 16),
        Insn::load_u32(MAJOR, CTX, 4),
        Insn::load_u32(MINOR, CTX, 8),
    ];
    let verdict = |allow: bool| [Insn::mov32_imm(0, i32::from(allow)), Insn::exit()];
    for (key, &bits) in &emu.exceptions {
        let typ = match key.kind {
            Kind::Block => dev::BLOCK,
            Kind::Char => dev::CHAR,
            // The emulator turns type-a rules into the default.
            Kind::All => continue,
        };
        // Jumps are written with the offset to the end of the block; the
        // block's length is only known once it is complete.
        let mut block = vec![Insn::jne32_imm(TYPE, typ, 0)];
        if bits & acc::ALL != acc::ALL {
            block.push(Insn::mov32_reg(TMP, ACCESS));
            block.push(Insn::and32_imm(TMP, i32::from(bits)));
            block.push(Insn::jne32_reg(TMP, ACCESS, 0));
        }
        if let Some(m) = key.major {
            block.push(Insn::jne32_imm(MAJOR, m, 0));
        }
        if let Some(m) = key.minor {
            block.push(Insn::jne32_imm(MINOR, m, 0));
        }
        block.extend(verdict(!emu.default_allow));
        let len = block.len();
        for (i, ins) in block.iter_mut().enumerate() {
            if ins.is_jump() {
                // Relative to the next instruction: land just past this block.
                ins.off = (len - i - 1) as i16;
            }
        }
        p.extend(block);
    }
    p.extend(verdict(emu.default_allow));
    p
}

#[cfg(test)]
mod tests {
    use super::super::interp::run;
    use super::super::{acc, dev, emulate};
    use super::*;

    #[test]
    fn default_list_program_is_small_and_denies_by_default() {
        let emu = emulate(&[]).unwrap();
        let p = program(&emu);
        // 6 loads + per default rule at most 8 + the final verdict.
        assert!(p.len() < 6 + 11 * 8 + 2, "{} instructions", p.len());
        assert_eq!(p[p.len() - 2], Insn::mov32_imm(0, 0));
        assert_eq!(run(&p, dev::CHAR, acc::READ, 1, 3), 1);
        assert_eq!(run(&p, dev::CHAR, acc::READ, 10, 229), 0);
    }
}
