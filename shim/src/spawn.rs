//! Turns a spawn request into a running child: validates and normalizes the spec, resolves the
//! executable, user, environment and directory, creates pipes or a pty, and starts the child, which
//! has exec'd or reported why it could not by the time `sys::fork_exec` returns.

mod stdio;

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use protocol::SpawnRequest;

use crate::error::Error;
use crate::pump::Sources;
use crate::stdin::Stdin;
use crate::sys::{self, Exec, Forked, Stage};
use stdio::{Unwatched, keep_writers, pipes, pty, watch_pipes};

/// `PATH` used to find a bare executable name when the process's environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The parent's handles on a child that exec'd successfully.
#[derive(Debug)]
pub(crate) struct Started {
    /// The child's pid.
    pub(crate) pid: i32,
    /// Its output.
    pub(crate) sources: Sources,
    /// Its stdin, if any.
    pub(crate) stdin: Option<Stdin>,
    /// A handle on its pty master, if any.
    pub(crate) tty: Option<OwnedFd>,
    /// The shim's copies of the write ends of the child's stdout and stderr pipes, to be closed
    /// once the child is reaped (see [`crate::proc::Links::writers`]).
    pub(crate) writers: Option<(OwnedFd, OwnedFd)>,
    /// The child could not set its own `oom_score_adj` (see [`set_oom_later`]).
    pub(crate) oom_pending: bool,
}

/// What a failed spawn leaves behind.
#[derive(Debug)]
pub(crate) struct Failed {
    /// Pid of a child that was forked and must be reaped and ignored, if one was.
    pub(crate) pid: Option<i32>,
    /// The error for the client.
    pub(crate) error: Error,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed { pid: None, error }
    }
}

fn cstring(s: &str, what: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::InvalidSpec(format!("{what} contains a NUL byte")))
}

/// The environment of a process: `base` overlaid with the request's `K=V` entries, later ones winning.
pub(crate) fn environment(
    base: &[(String, String)],
    overlay: &[String],
) -> Result<Vec<(String, String)>, Error> {
    let mut env: Vec<(String, String)> = base.to_vec();
    let mut index: HashMap<String, usize> = env
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), i))
        .collect();
    for entry in overlay {
        let (k, v) = entry
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| Error::InvalidSpec(format!("env entry {entry:?} is not KEY=VALUE")))?;
        match index.get(k) {
            Some(&i) => env[i].1 = v.to_owned(),
            None => {
                index.insert(k.to_owned(), env.len());
                env.push((k.to_owned(), v.to_owned()));
            }
        }
    }
    Ok(env)
}

fn envp_of(env: &[(String, String)]) -> Result<Arc<[CString]>, Error> {
    env.iter()
        .map(|(k, v)| cstring(&format!("{k}={v}"), "env"))
        .collect()
}

/// The `K=V` C strings of the shim's base environment, made once and shared by every spawn that
/// adds nothing to it (about three allocations per variable saved on each).
fn base_envp(base: &[(String, String)]) -> Result<Arc<[CString]>, Error> {
    type Made = Option<(Vec<(String, String)>, Arc<[CString]>)>;
    static MADE: Mutex<Made> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((of, envp)) = &*made
        && of.as_slice() == base
    {
        return Ok(envp.clone());
    }
    let envp = envp_of(base)?;
    *made = Some((base.to_vec(), envp.clone()));
    Ok(envp)
}

/// Finds the executable: a path with `/` as is, else the first executable file on `PATH`.
pub(crate) fn resolve_executable(path: &str, env: &[(String, String)]) -> Result<PathBuf, Error> {
    let not_found = |e: io::Error| Error::ExecutableNotFound {
        path: path.to_owned(),
        source: e,
    };
    if path.is_empty() {
        return Err(not_found(io::Error::from_raw_os_error(libc::ENOENT)));
    }
    if path.contains('/') {
        return Ok(PathBuf::from(path));
    }
    let search = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    search
        .split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(path))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| not_found(io::Error::from_raw_os_error(libc::ENOENT)))
}

/// Bytes of a spec's strings: what remembering the process costs beyond its output.
pub(crate) fn spec_bytes(spec: &SpawnRequest) -> usize {
    spec.path.len()
        + spec
            .args
            .iter()
            .chain(&spec.env)
            .map(String::len)
            .sum::<usize>()
        + spec.dir.as_ref().map_or(0, String::len)
        + spec.user.as_ref().map_or(0, String::len)
}

/// Looks up the user and creates the directory on a blocking thread: both touch files a step can
/// plant (a FIFO as `/etc/passwd`, a directory on a hung mount), which must not stall the runtime.
async fn prepare(spec: &SpawnRequest) -> Result<Option<sys::Credentials>, Error> {
    let user = spec.user.clone();
    let dir = spec.dir.clone();
    let work = move || -> Result<_, Error> {
        let creds = match &user {
            Some(u) => Some(crate::user::resolve(u, Path::new("/")).map_err(Error::InvalidSpawn)?),
            None => None,
        };
        if let Some(dir) = &dir {
            crate::files::make_dirs(Path::new(dir)).map_err(|e| {
                Error::InvalidSpawn(format!("cannot create working directory {dir:?}: {e}"))
            })?;
        }
        Ok(creds)
    };
    if spec.user.is_none() && spec.dir.is_none() {
        return Ok(None);
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::internal("preparing a spawn", io::Error::other(e)))?
}

/// What a spawn prepares before the fork (which may wait on a blocking thread): the executable, its
/// argv and environment as C strings, the directory and the credentials.
#[derive(Debug)]
pub(crate) struct Plan {
    path: CString,
    argv: Vec<CString>,
    envp: Arc<[CString]>,
    dir: Option<CString>,
    creds: Option<sys::Credentials>,
}

/// Validates `spec` and prepares what its fork needs, with the shim's `base_env`. Nothing is
/// created yet: dropping the future or the plan leaves nothing behind.
pub(crate) async fn plan(
    spec: &SpawnRequest,
    base_env: &[(String, String)],
) -> Result<Plan, Error> {
    // Every string becomes a C string: refuse NULs before anything is looked up or created.
    let strings = [
        ("path", Some(&spec.path)),
        ("dir", spec.dir.as_ref()),
        ("user", spec.user.as_ref()),
    ];
    for (what, s) in strings {
        if s.is_some_and(|s| s.contains('\0')) {
            return Err(Error::InvalidSpec(format!("{what} contains a NUL byte")));
        }
    }
    let merged;
    let env = if spec.env.is_empty() {
        base_env
    } else {
        merged = environment(base_env, &spec.env)?;
        &merged
    };
    let exe = resolve_executable(&spec.path, env)?;
    let creds = prepare(spec).await?;
    let mut argv = vec![cstring(&spec.path, "path")?];
    for a in &spec.args {
        argv.push(cstring(a, "args")?);
    }
    let envp = if spec.env.is_empty() {
        base_envp(base_env)?
    } else {
        envp_of(env)?
    };
    Ok(Plan {
        path: cstring(&exe.to_string_lossy(), "path")?,
        argv,
        envp,
        dir: spec.dir.as_deref().map(|d| cstring(d, "dir")).transpose()?,
        creds,
    })
}

/// Starts the process `plan` prepared for `spec`: creates its pipes or pty and forks. Synchronous,
/// so a caller that records the child right after cannot be interrupted in between (a client that
/// hangs up drops the request's future only at an await). `fork` forks and execs (the table wraps
/// [`sys::fork_exec`] to record the pid under its lock); the child's `oom_score_adj` is set to
/// `oom_score_adj` before its program runs, or [`Started::oom_pending`] says it is not yet.
pub(crate) fn start(
    plan: Plan,
    spec: &SpawnRequest,
    oom_score_adj: i32,
    fork: impl FnOnce(&Exec) -> io::Result<Forked>,
) -> Result<Started, Failed> {
    let ends = match spec.tty {
        Some(size) => pty(size)?,
        None => pipes(spec.stdin)?,
    };
    let exec = Exec {
        path: plan.path,
        argv: plan.argv,
        envp: plan.envp,
        dir: plan.dir,
        creds: plan.creds,
        stdio: ends.stdio,
        oom_score_adj: Some(oom_score_adj),
    };
    let forked = fork(&exec).map_err(|e| Error::io("forking", e))?;
    let writers = keep_writers(exec.stdio, forked.failed.is_none());
    let pid = forked.pid;
    if let Some((stage, err)) = forked.failed {
        return Err(Failed {
            pid: Some(pid),
            error: set_up_error(spec, stage, err),
        });
    }
    let sources = match ends.sources {
        Unwatched::Ready(s) => s,
        Unwatched::Pipes(out, err) => match watch_pipes(out, err) {
            Ok(s) => s,
            Err(error) => {
                // The child runs already and nobody could read it: stop it (its own session's
                // group; not yet reaped, so the pid is still its).
                let _ = sys::kill_group(pid, libc::SIGKILL);
                return Err(Failed {
                    pid: Some(pid),
                    error,
                });
            }
        },
    };
    Ok(Started {
        pid,
        sources,
        stdin: ends.stdin,
        tty: ends.tty,
        writers,
        oom_pending: !forked.oom_set,
    })
}

/// The error for the client when the child's set-up failed at `stage` with `err`.
fn set_up_error(spec: &SpawnRequest, stage: Stage, err: io::Error) -> Error {
    match stage {
        Stage::Exec => match err.raw_os_error() {
            Some(
                libc::ENOENT
                | libc::EACCES
                | libc::ENOEXEC
                | libc::ENOTDIR
                | libc::ELOOP
                | libc::ENAMETOOLONG
                | libc::EISDIR
                | libc::ETXTBSY
                | libc::EPERM,
            ) => Error::ExecutableNotFound {
                path: spec.path.clone(),
                source: err,
            },
            _ => Error::InvalidSpawn(format!("cannot execute {:?}: {err}", spec.path)),
        },
        Stage::Credentials => {
            Error::InvalidSpawn(format!("cannot switch to user {:?}: {err}", spec.user))
        }
        Stage::Chdir => {
            Error::InvalidSpawn(format!("cannot enter directory {:?}: {err}", spec.dir))
        }
        Stage::Setup => Error::internal("setting up the child", err),
    }
}

/// Sets the `oom_score_adj` of a child that could not set its own (a shim that is not root): the
/// shim is non-dumpable, so the child's `/proc` entry stays root's until `execve` has installed the
/// program's credentials; tries again for a few milliseconds.
pub(crate) async fn set_oom_later(pid: i32, oom_score_adj: i32) {
    let mut tries = 0;
    while let Err(e) = crate::oom::set_score_adj(pid, oom_score_adj) {
        tries += 1;
        if tries > 20 || e.kind() != io::ErrorKind::PermissionDenied {
            crate::debug!(pid, cause = %e, "cannot set oom_score_adj");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_micros(250)).await;
    }
}
