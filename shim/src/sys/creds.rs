//! The shim's own credentials, for deciding which owners it may give (PROTOCOL.md 4.8.3): its
//! effective group, its supplementary groups and whether `CAP_CHOWN` is among its effective
//! capabilities (`capget`, not `/proc`, so it holds wherever `/proc` is not mounted).
#![allow(unsafe_code)]

use std::io;

use super::cvt;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words of each capability set.
const CAP_VERSION_3: u32 = 0x2008_0522;
/// `CAP_CHOWN`: bit 0 of the first word.
const CAP_CHOWN: u32 = 0;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Whether `CAP_CHOWN` is in the shim's effective set.
pub(crate) fn has_cap_chown() -> io::Result<bool> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: a valid header and room for the two words version 3 writes.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    cvt(r as libc::c_int)?;
    Ok(data[0].effective & (1 << CAP_CHOWN) != 0)
}

/// Effective group id of the shim.
pub(crate) fn getegid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getegid() }
}

/// The shim's supplementary groups.
pub(crate) fn groups() -> io::Result<Vec<u32>> {
    // SAFETY: size 0 only counts, writing nothing.
    let n = cvt(unsafe { libc::getgroups(0, std::ptr::null_mut()) })?;
    let mut gids = vec![0; n as usize];
    // SAFETY: `gids` has room for `n` ids.
    let got = cvt(unsafe { libc::getgroups(n, gids.as_mut_ptr()) })?;
    gids.truncate(got as usize);
    Ok(gids)
}

#[cfg(test)]
mod tests {
    /// The capability bit agrees with the kernel's own report in `/proc/self/status`.
    #[test]
    fn cap_chown_matches_proc_status() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(super::has_cap_chown().unwrap(), eff & 1 == 1);
    }

    #[test]
    fn groups_match_proc_status() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap()
                .split_whitespace()
                .map(|g| g.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(super::getegid(), field("Gid:")[1]);
        let mut groups = super::groups().unwrap();
        groups.sort_unstable();
        let mut want = field("Groups:");
        want.sort_unstable();
        assert_eq!(groups, want);
    }
}
