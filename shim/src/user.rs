//! Resolves a spawn request's `user` (`uid`, `uid:gid`, `name`, `name:group`) against the container's
//! own `/etc/passwd` and `/etc/group`, read as plain files (no NSS in a static binary).

use std::path::Path;

use crate::sys::Credentials;

/// Largest passwd or group file read; a bigger one is refused rather than read into memory.
const MAX_FILE: u64 = 4 << 20; // 4 MiB, as the refusal says

/// Reads a passwd or group file that a step may have replaced: opened without blocking (a FIFO
/// would otherwise wait for a writer) and read only if it is a regular file of sane size. A
/// missing file reads as empty, as it does for libc.
fn read_db(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // One error mapping for every step (binary size).
    let read = || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() > MAX_FILE {
            return Err(std::io::Error::other("not a regular file under 4 MiB"));
        }
        let mut text = String::new();
        file.take(MAX_FILE).read_to_string(&mut text)?;
        Ok(text)
    };
    match read() {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Resolves `spec` using the passwd and group files under `root` (normally `/`).
pub(crate) fn resolve(spec: &str, root: &Path) -> Result<Credentials, String> {
    let passwd = read_db(&root.join("etc/passwd"))?;
    let group = read_db(&root.join("etc/group"))?;
    let (user_part, group_part) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user_part.is_empty() || group_part == Some("") {
        return Err(format!("user {spec:?} is malformed"));
    }
    // passwd lines: name:x:uid:gid:gecos:home:shell
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| {
            f.len() >= 4
                && (f[0] == user_part || (user_part.parse::<u32>().is_ok() && f[2] == user_part))
        });
    let uid: u32 = match user_part.parse() {
        Ok(n) => n,
        Err(_) => entry
            .as_ref()
            .and_then(|f| f[2].parse().ok())
            .ok_or_else(|| format!("no user {user_part:?} in /etc/passwd"))?,
    };
    let gid: u32 = match group_part {
        Some(g) => match g.parse() {
            Ok(n) => n,
            Err(_) => group
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| format!("no group {g:?} in /etc/group"))?,
        },
        None => entry
            .as_ref()
            .and_then(|f| f[3].parse().ok())
            .unwrap_or(uid),
    };
    let name = entry.as_ref().map(|f| f[0]);
    let mut groups: Vec<u32> = match name {
        Some(n) => group
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .filter(|f| f.len() >= 4 && f[3].split(',').any(|m| m == n))
            .filter_map(|f| f[2].parse().ok())
            .collect(),
        None => Vec::new(),
    };
    groups.retain(|g| *g != gid);
    groups.insert(0, gid);
    Ok(Credentials { uid, gid, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_groups() {
        let root = std::env::temp_dir().join(format!("stepshim-user-{}", std::process::id()));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(
            root.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nci:x:1000:1001::/home/ci:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            root.join("etc/group"),
            "root:x:0:\nci:x:1001:\ndocker:x:999:ci,other\n",
        )
        .unwrap();
        let c = resolve("ci", &root).unwrap();
        assert_eq!(
            (c.uid, c.gid, c.groups.clone()),
            (1000, 1001, vec![1001, 999])
        );
        assert_eq!(resolve("1000", &root).unwrap().gid, 1001);
        let c = resolve("4242:4343", &root).unwrap();
        assert_eq!((c.uid, c.gid, c.groups), (4242, 4343, vec![4343]));
        assert_eq!(resolve("ci:root", &root).unwrap().gid, 0);
        assert!(resolve("nobody-here", &root).is_err());
        assert!(resolve("ci:nogroup", &root).is_err());
        assert!(resolve(":1", &root).is_err());
        // A FIFO planted as the group file is refused at once instead of blocking the reader.
        std::fs::remove_file(root.join("etc/group")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(root.join("etc/group"))
            .status()
            .unwrap();
        assert!(made.success());
        let err = resolve("ci", &root).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(root).ok();
    }
}
