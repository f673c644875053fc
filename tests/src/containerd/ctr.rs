//! `ctr` helpers bound to one private containerd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::Containerd;
use crate::cmd::{self, CmdOutput, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};

/// PATH given to `--rootfs` containers (see [`RunSpec::path_env`]).
pub const ROOTFS_PATH_ENV: &str = "PATH=/bin:/sbin:/usr/bin:/usr/sbin";

/// One `ctr run`. Build with struct update syntax:
/// `RunSpec { id: "a".into(), rootfs: Some(p), args: vec!["true".into()], ..RunSpec::new(rt) }`.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub id: String,
    /// `--runtime`: a runtime name (`io.containerd.rund.v2`) or an absolute shim path.
    pub runtime: String,
    /// `--rootfs DIR`; exclusive with `image`.
    pub rootfs: Option<PathBuf>,
    /// An image reference already imported into the namespace.
    pub image: Option<String>,
    /// The command and its arguments (empty: the image's default).
    pub args: Vec<String>,
    /// Extra ctr run flags, placed before the positionals (e.g. `--env`, `--memory-limit`).
    pub flags: Vec<String>,
    /// `--rm` (remove container and task when it exits). Ignored with `detach`.
    pub rm: bool,
    /// `-d --null-io`: return once started; stdio goes to /dev/null.
    pub detach: bool,
    /// `-t`: run with a terminal.
    pub tty: bool,
    /// Bytes fed to stdin, then EOF; `None`: /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// With `rootfs`: add `--env PATH=/bin:/sbin:/usr/bin:/usr/sbin` (ctr's `--rootfs` spec has no
    /// env at all, so a bare `echo` would not resolve). Default true.
    pub path_env: bool,
    /// Namespace; `None`: the instance's namespace.
    pub namespace: Option<String>,
    pub timeout: Duration,
}

impl RunSpec {
    pub fn new(runtime: &str) -> RunSpec {
        RunSpec {
            id: String::new(),
            runtime: runtime.to_owned(),
            rootfs: None,
            image: None,
            args: Vec::new(),
            flags: Vec::new(),
            rm: true,
            detach: false,
            tty: false,
            stdin: None,
            path_env: true,
            namespace: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

pub(super) fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

impl Containerd {
    /// `ctr --address <sock> --namespace <ns>` ready for more args.
    pub fn ctr_command(&self, namespace: &str) -> Command {
        let mut c = Command::new(self.ctr_path());
        c.arg("--address")
            .arg(&self.layout.grpc)
            .arg("--namespace")
            .arg(namespace);
        c
    }

    /// Run ctr in the instance namespace. Returns the output whatever the exit status.
    pub fn ctr(&self, args: &[&str]) -> Result<CmdOutput> {
        self.ctr_in(&self.namespace, args)
    }

    /// Run ctr in namespace `ns`.
    pub fn ctr_in(&self, ns: &str, args: &[&str]) -> Result<CmdOutput> {
        self.ctr_full(ns, &strs(args), None, DEFAULT_TIMEOUT)
    }

    /// Run ctr with everything explicit.
    pub fn ctr_full(
        &self,
        ns: &str,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<CmdOutput> {
        let mut c = self.ctr_command(ns);
        c.args(args);
        cmd::run(c, stdin, timeout)
    }

    /// Run a container per `spec`. The output is returned whatever the exit status
    /// (`code()` is the container's exit code for a foreground run).
    pub fn run_spec(&self, spec: &RunSpec) -> Result<CmdOutput> {
        let mut a: Vec<String> = vec!["run".into()];
        if spec.detach {
            a.extend(strs(&["-d", "--null-io"]));
        } else if spec.rm {
            a.push("--rm".into());
        }
        if spec.tty {
            a.push("-t".into());
        }
        a.push("--runtime".into());
        a.push(spec.runtime.clone());
        if spec.path_env && spec.rootfs.is_some() {
            a.extend(strs(&["--env", ROOTFS_PATH_ENV]));
        }
        a.extend(spec.flags.iter().cloned());
        match (&spec.rootfs, &spec.image) {
            (Some(r), None) => {
                a.push("--rootfs".into());
                a.push(r.display().to_string());
            }
            (None, Some(i)) => a.push(i.clone()),
            _ => {
                return Err(Error::Parse {
                    cmd: "ctr run".into(),
                    detail: "RunSpec needs exactly one of rootfs and image".into(),
                })
            }
        }
        a.push(spec.id.clone());
        a.extend(spec.args.iter().cloned());
        let ns = spec.namespace.as_deref().unwrap_or(&self.namespace);
        let mut c = self.ctr_command(ns);
        c.args(&a);
        let feeder = spec
            .stdin
            .clone()
            .map(|data| self.feed_when_started(ns, &spec.id, data));
        cmd::run_fed(c, feeder, spec.timeout)
    }

    /// ctr only forwards stdin's EOF (CloseIO) once its task handle exists; an EOF read earlier
    /// is lost and the container waits forever. So write stdin only once the task runs.
    fn feed_when_started(&self, ns: &str, id: &str, data: Vec<u8>) -> cmd::Feeder {
        let mut probe = self.ctr_command(ns);
        probe.args(["task", "ls"]);
        let ctr = self.ctr_path();
        let (probe_args, id) = (
            probe.get_args().map(|a| a.to_owned()).collect::<Vec<_>>(),
            id.to_owned(),
        );
        Box::new(move |mut stdin| {
            use std::io::Write;
            let deadline = Instant::now() + DEFAULT_TIMEOUT;
            while Instant::now() < deadline {
                let mut c = Command::new(&ctr);
                c.args(&probe_args);
                let started = cmd::run(c, None, Duration::from_secs(10))
                    .map(|o| {
                        o.stdout.lines().any(|l| {
                            let f: Vec<&str> = l.split_whitespace().collect();
                            f.first() == Some(&id.as_str())
                                && matches!(f.get(2), Some(&"RUNNING") | Some(&"STOPPED"))
                        })
                    })
                    .unwrap_or(false);
                if started {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = stdin.write_all(&data);
        })
    }

    /// `ctr run --rm --runtime <runtime> --rootfs <rootfs> <id> <args>`.
    pub fn run(&self, id: &str, rootfs: &Path, args: &[&str], runtime: &str) -> Result<CmdOutput> {
        self.run_spec(&RunSpec {
            id: id.into(),
            rootfs: Some(rootfs.into()),
            args: strs(args),
            ..RunSpec::new(runtime)
        })
    }

    /// Runs `spec` (a foreground `--rm` run) `times` times in a row under its one id;
    /// panics unless every run exits 0 printing `stdout`.
    pub fn assert_runs_again(&self, spec: &RunSpec, times: usize, stdout: &str) {
        for i in 0..times {
            let out = self.run_spec(spec).expect("ctr run");
            assert_eq!(
                (out.code(), out.stdout.as_str()),
                (0, stdout),
                "run {i} of {}: {out:?}",
                spec.id
            );
        }
    }

    /// Same as [`Containerd::run`] with `input` on stdin.
    pub fn run_stdin(
        &self,
        id: &str,
        rootfs: &Path,
        args: &[&str],
        runtime: &str,
        input: &[u8],
    ) -> Result<CmdOutput> {
        self.run_spec(&RunSpec {
            id: id.into(),
            rootfs: Some(rootfs.into()),
            args: strs(args),
            stdin: Some(input.to_vec()),
            ..RunSpec::new(runtime)
        })
    }

    /// `ctr run -d --null-io ...`: fails unless ctr reports success (the task is started).
    pub fn run_detached(
        &self,
        id: &str,
        rootfs: &Path,
        args: &[&str],
        runtime: &str,
    ) -> Result<CmdOutput> {
        self.run_spec(&RunSpec {
            id: id.into(),
            rootfs: Some(rootfs.into()),
            args: strs(args),
            detach: true,
            ..RunSpec::new(runtime)
        })?
        .check()
    }

    /// `ctr run --rm --runtime <runtime> <image> <id> <args>`.
    pub fn run_image(
        &self,
        id: &str,
        image: &str,
        args: &[&str],
        runtime: &str,
    ) -> Result<CmdOutput> {
        self.run_spec(&RunSpec {
            id: id.into(),
            image: Some(image.into()),
            args: strs(args),
            ..RunSpec::new(runtime)
        })
    }

    /// `ctr -n <ns> images import <tarball>` (unpacked for overlayfs).
    pub fn import_image(&self, ns: &str, tarball: &Path) -> Result<CmdOutput> {
        let t = tarball.display().to_string();
        self.ctr_in(ns, &["images", "import", &t])?.check()
    }
}
