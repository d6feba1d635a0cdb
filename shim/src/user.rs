//! Resolves a spawn request's `user` (`uid`, `uid:gid`, `name`, `name:group`) against the container's
//! own `/etc/passwd` and `/etc/group`, read as plain files (no NSS in a static binary).

use std::path::Path;

use crate::sys::Credentials;

/// Resolves `spec` using the passwd and group files under `root` (normally `/`).
pub fn resolve(spec: &str, root: &Path) -> Result<Credentials, String> {
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
    let group = std::fs::read_to_string(root.join("etc/group")).unwrap_or_default();
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
        std::fs::remove_dir_all(root).ok();
    }
}
