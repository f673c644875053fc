//! The few eBPF instructions a device filter needs, and their encoding as
//! the kernel's `struct bpf_insn` (8 bytes).

/// Instruction classes, sizes, modes and operations (linux/bpf_common.h, linux/bpf.h).
pub(crate) mod op {
    pub const LDX: u8 = 0x01;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const W: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const AND: u8 = 0x50;
    pub const RSH: u8 = 0x70;
    pub const MOV: u8 = 0xb0;
    pub const JNE: u8 = 0x50;
    pub const EXIT: u8 = 0x90;
}

/// One eBPF instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// `dst = *(u32 *)(src + off)`
    pub fn load_u32(dst: u8, src: u8, off: i16) -> Self {
        Insn {
            code: op::LDX | op::MEM | op::W,
            dst,
            src,
            off,
            imm: 0,
        }
    }

    /// `dst = (u32) imm`
    pub fn mov32_imm(dst: u8, imm: i32) -> Self {
        Self::alu32(op::MOV | op::K, dst, 0, imm)
    }

    /// `dst = (u32) src`
    pub fn mov32_reg(dst: u8, src: u8) -> Self {
        Self::alu32(op::MOV | op::X, dst, src, 0)
    }

    /// `dst &= imm` (32 bit)
    pub fn and32_imm(dst: u8, imm: i32) -> Self {
        Self::alu32(op::AND | op::K, dst, 0, imm)
    }

    /// `dst >>= imm` (32 bit, logical)
    pub fn rsh32_imm(dst: u8, imm: i32) -> Self {
        Self::alu32(op::RSH | op::K, dst, 0, imm)
    }

    fn alu32(code: u8, dst: u8, src: u8, imm: i32) -> Self {
        Insn {
            code: op::ALU | code,
            dst,
            src,
            off: 0,
            imm,
        }
    }

    /// `if (u32) dst != (u32) imm goto +off` (32-bit compare: no sign
    /// extension of the immediate, so every u32 major/minor compares exactly).
    pub fn jne32_imm(dst: u8, imm: u32, off: i16) -> Self {
        Insn {
            code: op::JMP32 | op::JNE | op::K,
            dst,
            src: 0,
            off,
            imm: imm as i32,
        }
    }

    /// `if (u32) dst != (u32) src goto +off`
    pub fn jne32_reg(dst: u8, src: u8, off: i16) -> Self {
        Insn {
            code: op::JMP32 | op::JNE | op::X,
            dst,
            src,
            off,
            imm: 0,
        }
    }

    pub fn exit() -> Self {
        Insn {
            code: op::JMP | op::EXIT,
            dst: 0,
            src: 0,
            off: 0,
            imm: 0,
        }
    }

    /// Whether this is a conditional jump (its `off` is a branch target).
    pub fn is_jump(&self) -> bool {
        let class = self.code & 0x07;
        (class == op::JMP || class == op::JMP32) && self.code & 0xf0 != op::EXIT
    }

    /// The kernel's `struct bpf_insn` in native byte order.
    pub fn encode(&self) -> [u8; 8] {
        // The register nibbles are a bitfield: dst is the low nibble on
        // little-endian hosts and the high one on big-endian hosts.
        let regs = if cfg!(target_endian = "little") {
            (self.src << 4) | (self.dst & 0x0f)
        } else {
            (self.dst << 4) | (self.src & 0x0f)
        };
        let off = self.off.to_ne_bytes();
        let imm = self.imm.to_ne_bytes();
        [
            self.code, regs, off[0], off[1], imm[0], imm[1], imm[2], imm[3],
        ]
    }
}

impl Insn {
    /// The inverse of [`Insn::encode`].
    pub fn decode(b: [u8; 8]) -> Self {
        let (dst, src) = if cfg!(target_endian = "little") {
            (b[1] & 0x0f, b[1] >> 4)
        } else {
            (b[1] >> 4, b[1] & 0x0f)
        };
        Insn {
            code: b[0],
            dst,
            src,
            off: i16::from_ne_bytes([b[2], b[3]]),
            imm: i32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// A program from the bytes of [`encode_all`] (a trailing partial
/// instruction is dropped).
pub fn decode_all(bytes: &[u8]) -> Vec<Insn> {
    bytes
        .chunks_exact(8)
        .map(|c| Insn::decode([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect()
}

/// A whole program as the bytes `BPF_PROG_LOAD` takes.
pub fn encode_all(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_kernel_layout() {
        // Reference bytes as clang/bpftool emit them on x86_64.
        if cfg!(target_endian = "little") {
            // r2 = *(u32 *)(r1 + 0)
            assert_eq!(
                Insn::load_u32(2, 1, 0).encode(),
                [0x61, 0x12, 0, 0, 0, 0, 0, 0]
            );
            // w0 = 1
            assert_eq!(Insn::mov32_imm(0, 1).encode(), [0xb4, 0, 0, 0, 1, 0, 0, 0]);
            // w1 = w3
            assert_eq!(
                Insn::mov32_reg(1, 3).encode(),
                [0xbc, 0x31, 0, 0, 0, 0, 0, 0]
            );
            // if w4 != 195 goto +3
            assert_eq!(
                Insn::jne32_imm(4, 195, 3).encode(),
                [0x56, 0x04, 3, 0, 195, 0, 0, 0]
            );
            // if w1 != w3 goto +2
            assert_eq!(
                Insn::jne32_reg(1, 3, 2).encode(),
                [0x5e, 0x31, 2, 0, 0, 0, 0, 0]
            );
            assert_eq!(Insn::exit().encode(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        }
        assert!(Insn::jne32_imm(4, 1, 1).is_jump());
        assert!(!Insn::exit().is_jump());
        let p = [Insn::jne32_imm(5, u32::MAX, 7), Insn::mov32_reg(1, 3)];
        assert_eq!(decode_all(&encode_all(&p)), p);
    }
}
