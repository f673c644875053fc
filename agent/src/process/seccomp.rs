//! `linux.seccomp` to a libseccomp filter. Translation is pure (and tested);
//! building resolves syscall names, skipping the ones this libseccomp or
//! architecture does not know.

use std::str::FromStr;

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp: action {0} is not supported by rund")]
    Unsupported(String),
    #[error("seccomp: unknown architecture {0}")]
    Arch(String),
    #[error("seccomp: {what}: {source}")]
    Lib {
        what: String,
        source: libseccomp::error::SeccompError,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub syscall: String,
    pub action: ScmpAction,
    /// (arg index, operator, datum); all must match.
    pub conds: Vec<(u32, ScmpCompareOp, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub default: ScmpAction,
    pub arches: Vec<ScmpArch>,
    pub rules: Vec<Rule>,
}

fn action(a: LinuxSeccompAction, errno_ret: Option<u32>) -> Result<ScmpAction, SeccompError> {
    Ok(match a {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            ScmpAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => {
            ScmpAction::Errno(errno_ret.unwrap_or(libc::EPERM as u32) as i32)
        }
        LinuxSeccompAction::ScmpActTrace => {
            ScmpAction::Trace(errno_ret.unwrap_or(libc::EPERM as u32) as u16)
        }
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
        LinuxSeccompAction::ScmpActNotify => {
            return Err(SeccompError::Unsupported("SCMP_ACT_NOTIFY".into()))
        }
    })
}

fn op(o: LinuxSeccompOperator, value: u64, value_two: Option<u64>) -> (ScmpCompareOp, u64) {
    match o {
        LinuxSeccompOperator::ScmpCmpNe => (ScmpCompareOp::NotEqual, value),
        LinuxSeccompOperator::ScmpCmpLt => (ScmpCompareOp::Less, value),
        LinuxSeccompOperator::ScmpCmpLe => (ScmpCompareOp::LessOrEqual, value),
        LinuxSeccompOperator::ScmpCmpEq => (ScmpCompareOp::Equal, value),
        LinuxSeccompOperator::ScmpCmpGe => (ScmpCompareOp::GreaterEqual, value),
        LinuxSeccompOperator::ScmpCmpGt => (ScmpCompareOp::Greater, value),
        // OCI: value is the mask, valueTwo the datum.
        LinuxSeccompOperator::ScmpCmpMaskedEq => {
            (ScmpCompareOp::MaskedEqual(value), value_two.unwrap_or(0))
        }
    }
}

pub fn plan(s: &LinuxSeccomp) -> Result<Plan, SeccompError> {
    let default = action(s.default_action(), s.default_errno_ret())?;
    let mut arches = Vec::new();
    for a in s.architectures().iter().flatten() {
        let name = serde_json::to_value(a)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        arches.push(ScmpArch::from_str(&name).map_err(|_| SeccompError::Arch(name))?);
    }
    let mut rules = Vec::new();
    for sc in s.syscalls().iter().flatten() {
        let act = action(sc.action(), sc.errno_ret())?;
        // libseccomp refuses rules that repeat the default action.
        if act == default {
            continue;
        }
        let args: Vec<(u32, ScmpCompareOp, u64)> = sc
            .args()
            .iter()
            .flatten()
            .map(|a| {
                let (o, datum) = op(a.op(), a.value(), a.value_two());
                (a.index() as u32, o, datum)
            })
            .collect();
        // Several conditions on one argument cannot share a rule: one rule each (as runc).
        let mut idx: Vec<u32> = args.iter().map(|a| a.0).collect();
        idx.sort_unstable();
        let repeated = idx.windows(2).any(|w| w[0] == w[1]);
        for name in sc.names() {
            if repeated {
                for a in &args {
                    rules.push(Rule {
                        syscall: name.clone(),
                        action: act,
                        conds: vec![*a],
                    });
                }
            } else {
                rules.push(Rule {
                    syscall: name.clone(),
                    action: act,
                    conds: args.clone(),
                });
            }
        }
    }
    Ok(Plan {
        default,
        arches,
        rules,
    })
}

/// Builds the filter (not loaded yet). Returns it and the skipped syscall names.
pub fn build(p: &Plan) -> Result<(ScmpFilterContext, Vec<String>), SeccompError> {
    let lib = |what: &str| {
        let what = what.to_string();
        move |source| SeccompError::Lib { what, source }
    };
    let mut ctx = ScmpFilterContext::new(p.default).map_err(lib("init"))?;
    let native = ScmpArch::native();
    for a in &p.arches {
        if *a != native && *a != ScmpArch::Native {
            ctx.add_arch(*a).map_err(lib("add architecture"))?;
        }
    }
    // no_new_privs is set by the caller when the spec asks; without it, loading needs CAP_SYS_ADMIN.
    ctx.set_ctl_nnp(false).map_err(lib("disable nnp"))?;
    let mut skipped = Vec::new();
    for r in &p.rules {
        let Ok(sys) = ScmpSyscall::from_name(&r.syscall) else {
            skipped.push(r.syscall.clone());
            continue;
        };
        let res = if r.conds.is_empty() {
            ctx.add_rule(r.action, sys)
        } else {
            let conds: Vec<ScmpArgCompare> = r
                .conds
                .iter()
                .map(|(i, o, d)| ScmpArgCompare::new(*i, *o, *d))
                .collect();
            ctx.add_rule_conditional(r.action, sys, &conds)
        };
        if let Err(source) = res {
            return Err(SeccompError::Lib {
                what: format!("rule for {}", r.syscall),
                source,
            });
        }
    }
    Ok((ctx, skipped))
}

pub fn load(ctx: &ScmpFilterContext) -> Result<(), SeccompError> {
    ctx.load().map_err(|source| SeccompError::Lib {
        what: "load".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> LinuxSeccomp {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn translation_of_actions_ops_and_arches() {
        let s = spec(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86"],
            "syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},
                        {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                        {"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]},
                        {"names":["mount"],"action":"SCMP_ACT_ERRNO","errnoRet":1},
                        {"names":["kill"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}"#,
        );
        let p = plan(&s).unwrap();
        assert_eq!(p.default, ScmpAction::Errno(38));
        assert_eq!(p.arches, vec![ScmpArch::X8664, ScmpArch::X86]);
        let names: Vec<_> = p.rules.iter().map(|r| r.syscall.as_str()).collect();
        // "kill" repeats the default action and is dropped.
        assert_eq!(names, ["read", "write", "personality", "clone", "mount"]);
        assert_eq!(p.rules[2].conds, vec![(0, ScmpCompareOp::Equal, 8)]);
        assert_eq!(
            p.rules[3].conds,
            vec![(0, ScmpCompareOp::MaskedEqual(2114060288), 0)]
        );
        assert_eq!(p.rules[4].action, ScmpAction::Errno(1));
    }

    #[test]
    fn repeated_arg_index_splits_rules() {
        let s = spec(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["socket"],"action":"SCMP_ACT_ERRNO",
            "args":[{"index":0,"value":16,"op":"SCMP_CMP_EQ"},{"index":0,"value":40,"op":"SCMP_CMP_EQ"}]}]}"#,
        );
        let p = plan(&s).unwrap();
        assert_eq!(p.rules.len(), 2);
        assert_eq!(p.rules[1].conds, vec![(0, ScmpCompareOp::Equal, 40)]);
        assert_eq!(p.rules[0].action, ScmpAction::Errno(libc::EPERM));
    }

    #[test]
    fn notify_is_refused_and_unknown_names_skipped() {
        let s = spec(r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#);
        assert!(matches!(plan(&s), Err(SeccompError::Unsupported(_))));
        let s = spec(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["no_such_syscall_xyz","getpid"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        let (_ctx, skipped) = build(&plan(&s).unwrap()).unwrap();
        assert_eq!(skipped, ["no_such_syscall_xyz"]);
    }
}
