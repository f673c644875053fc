//! Tests only: a tiny interpreter for the instructions the generator emits,
//! and a reference evaluator of rule lists written independently of the
//! emulator. The generated program must agree with the reference on every
//! request of a dense grid, for thousands of random rule lists.

use super::{acc, dev, full_list, program, Emulator, Kind, Rule};
use crate::bpf::{op, Insn};

/// Run `p` on a `bpf_cgroup_dev_ctx`; panics on anything the kernel's
/// verifier would refuse in this subset (unknown opcode, uninitialised
/// register, backward jump, running off the end).
pub(crate) fn run(p: &[Insn], typ: u32, access: u8, major: u32, minor: u32) -> u64 {
    let ctx = [(u32::from(access) << 16) | typ, major, minor];
    let mut reg = [0u64; 11];
    let mut init = [false; 11];
    init[1] = true;
    let mut pc = 0usize;
    let get = |reg: &[u64; 11], init: &[bool; 11], r: u8| -> u64 {
        assert!(init[r as usize], "read of uninitialised r{r}");
        reg[r as usize]
    };
    loop {
        let i = *p
            .get(pc)
            .unwrap_or_else(|| panic!("ran off the end at {pc}"));
        pc += 1;
        let class = i.code & 0x07;
        match class {
            op::LDX => {
                assert_eq!(i.code, op::LDX | op::MEM | op::W, "load size/mode");
                assert_eq!(i.src, 1, "loads only from the context");
                assert!(matches!(i.off, 0 | 4 | 8), "ctx offset {}", i.off);
                reg[i.dst as usize] = u64::from(ctx[i.off as usize / 4]);
                init[i.dst as usize] = true;
            }
            op::ALU => {
                // MOV does not read its destination.
                let a = if i.code & 0xf0 == op::MOV {
                    0
                } else {
                    get(&reg, &init, i.dst) as u32
                };
                let b = if i.code & op::X != 0 {
                    get(&reg, &init, i.src) as u32
                } else {
                    i.imm as u32
                };
                let v = match i.code & 0xf0 {
                    op::MOV => b,
                    op::AND => a & b,
                    op::RSH => a >> b,
                    other => panic!("alu op {other:#x}"),
                };
                reg[i.dst as usize] = u64::from(v);
                init[i.dst as usize] = true;
            }
            op::JMP if i.code == op::JMP | op::EXIT => return get(&reg, &init, 0),
            op::JMP32 => {
                assert_eq!(i.code & 0xf0, op::JNE, "only jne");
                assert!(i.off >= 0, "backward jump");
                let a = get(&reg, &init, i.dst) as u32;
                let b = if i.code & op::X != 0 {
                    get(&reg, &init, i.src) as u32
                } else {
                    i.imm as u32
                };
                if a != b {
                    pc += i.off as usize;
                }
            }
            _ => panic!("opcode {:#x}", i.code),
        }
    }
}

/// The rule semantics, straight from the v1 kernel's algorithm on a plain
/// list (no map, no sorting): `None` when runc refuses the list.
fn reference(rules: &[Rule], kind: Kind, major: u32, minor: u32, access: u8) -> Option<bool> {
    let mut default_allow = false;
    let mut ex: Vec<Rule> = Vec::new();
    for r in rules {
        if r.kind == Kind::All {
            default_allow = r.allow;
            ex.clear();
            continue;
        }
        let same = |e: &Rule| (e.kind, e.major, e.minor) == (r.kind, r.major, r.minor);
        if r.allow != default_allow {
            match ex.iter_mut().find(|e| same(e)) {
                Some(e) => e.access |= r.access,
                None => ex.push(*r),
            }
        } else {
            let wider = ex.iter().any(|e| {
                e.kind == r.kind
                    && !same(e)
                    && (e.major.is_none() || e.major == r.major)
                    && (e.minor.is_none() || e.minor == r.minor)
                    && (e.major.is_none() || e.minor.is_none())
                    && e.access & r.access != 0
            });
            if wider {
                return None;
            }
            for e in ex.iter_mut().filter(|e| same(e)) {
                e.access &= !r.access;
            }
            ex.retain(|e| e.access != 0);
        }
    }
    let hit = ex.iter().any(|e| {
        e.kind == kind
            && e.major.is_none_or(|m| m == major)
            && e.minor.is_none_or(|m| m == minor)
            && access & !e.access == 0
    });
    Some(hit != default_allow)
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const MAJORS: [Option<u32>; 5] = [None, Some(1), Some(10), Some(136), Some(u32::MAX)];
const MINORS: [Option<u32>; 5] = [None, Some(0), Some(3), Some(229), Some(u32::MAX)];

fn random_rules(rng: &mut Rng) -> Vec<Rule> {
    let n = rng.next() % 9;
    (0..n)
        .map(|_| Rule {
            allow: rng.next().is_multiple_of(2),
            kind: rng.pick(&[Kind::All, Kind::Block, Kind::Char, Kind::Char]),
            major: rng.pick(&MAJORS),
            minor: rng.pick(&MINORS),
            access: 1 + (rng.next() % 7) as u8,
        })
        .collect()
}

fn emulate_list(rules: &[Rule]) -> Option<Emulator> {
    let mut e = Emulator::default();
    for r in rules {
        e.apply(r).ok()?;
    }
    Some(e)
}

#[test]
fn generated_programs_agree_with_the_rule_semantics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut lists, mut refused, mut checks) = (0, 0, 0);
    let defaults = full_list(&[]).unwrap();
    for _ in 0..3000 {
        let mut rules = random_rules(&mut rng);
        // Half the lists end with the defaults, as every container's does.
        if rng.next().is_multiple_of(2) {
            rules.extend(defaults.iter().copied());
        }
        let emu = emulate_list(&rules);
        let probe = reference(&rules, Kind::Char, 0, 0, acc::READ);
        assert_eq!(emu.is_some(), probe.is_some(), "refusal differs: {rules:?}");
        let Some(emu) = emu else {
            refused += 1;
            continue;
        };
        lists += 1;
        let p = program(&emu);
        for (kind, typ) in [(Kind::Block, dev::BLOCK), (Kind::Char, dev::CHAR)] {
            for major in [0, 1, 5, 10, 136, u32::MAX] {
                for minor in [0, 1, 3, 229, u32::MAX] {
                    for access in 1..=acc::ALL {
                        let want = reference(&rules, kind, major, minor, access).unwrap();
                        let got = run(&p, typ, access, major, minor) == 1;
                        assert_eq!(
                            got, want,
                            "{kind:?} {major}:{minor} access {access:03b} for {rules:?}"
                        );
                        assert_eq!(emu.allows(kind, major, minor, access), want);
                        checks += 1;
                    }
                }
            }
        }
    }
    // The generator must exercise both outcomes heavily.
    assert!(
        lists > 2000 && refused > 20,
        "{lists} lists, {refused} refused"
    );
    assert!(checks > 1_000_000, "{checks}");
}

#[test]
fn the_interpreter_rejects_what_the_verifier_would() {
    let uninit = [Insn::mov32_reg(0, 7), Insn::exit()];
    assert!(std::panic::catch_unwind(|| run(&uninit, 2, 2, 1, 3)).is_err());
    let off_end = [Insn::mov32_imm(0, 1)];
    assert!(std::panic::catch_unwind(|| run(&off_end, 2, 2, 1, 3)).is_err());
    let ok = [Insn::mov32_imm(0, 1), Insn::exit()];
    assert_eq!(run(&ok, 2, 2, 1, 3), 1);
}

#[test]
fn a_v2_cgroup_carries_the_filter_from_create_to_destroy() {
    use crate::fs::FakeFs;
    use crate::{CgroupConfig, Cgroups, Hierarchy};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cg");
    let fs = FakeFs::v2();
    fs.seed_root(&root).unwrap();
    let cfg = CgroupConfig {
        state_dir: tmp.path().join("state"),
        ..CgroupConfig::default()
    };
    let cg = Cgroups::with(Hierarchy::v2_at(&root), std::sync::Arc::new(fs), cfg);
    let rw = acc::READ | acc::WRITE;
    // No rules at all: the default list, never allow-all.
    let m = cg.create("/pod/c1", None).unwrap();
    let dir = root.join("pod/c1");
    let p = FakeFs::device_filter(&dir).expect("a filter without rules");
    assert_eq!(run(&p, dev::CHAR, rw, 1, 3), 1, "/dev/null");
    assert_eq!(run(&p, dev::CHAR, acc::READ, 10, 229), 0, "/dev/fuse");
    assert_eq!(run(&p, dev::BLOCK, acc::MKNOD, 8, 0), 1, "mknod");
    let res = |j: &str| -> oci_spec::runtime::LinuxResources { serde_json::from_str(j).unwrap() };
    m.update(&res(r#"{"devices": [{"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]}"#))
        .unwrap();
    let p = FakeFs::device_filter(&dir).unwrap();
    assert_eq!(run(&p, dev::CHAR, rw, 10, 229), 1, "fuse after the update");
    assert_eq!(
        run(&p, dev::CHAR, rw, 1, 3),
        1,
        "defaults stay after an update"
    );
    // An update without rules leaves the filter alone.
    m.update(&res(r#"{"pids": {"limit": 5}}"#)).unwrap();
    assert_eq!(FakeFs::device_filter(&dir).unwrap(), p);
    assert_eq!(cg.fs_counts().bpf, 2, "create and one update set it");
    m.destroy().unwrap();
    assert_eq!(cg.fs_counts().bpf, 3, "destroy detaches it");
    assert!(!dir.exists());
    // A list runc refuses leaves nothing behind.
    let e = cg
        .create(
            "/pod/c2",
            Some(&res(
                r#"{"devices": [{"allow": true, "type": "c", "major": 10, "access": "rwm"},
                    {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "r"}]}"#,
            )),
        )
        .unwrap_err();
    assert!(e.to_string().contains("devices[1]"), "{e}");
    assert!(!root.join("pod/c2").exists());
}
