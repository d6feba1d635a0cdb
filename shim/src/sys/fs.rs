//! File-system calls relative to directory fds, for extracting hostile tar streams (`files/`):
//! every name handed to these functions is one path component (or, for [`open_dir_beneath`], a
//! relative path resolved by the kernel without leaving the directory and without symlinks), and
//! none of them follows a symlink at the last component. Nothing here takes an absolute path
//! except [`open_root`] and [`open_dir_path`] (`/` or `.`).
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::cvt;

/// Flags of every directory open: read-only, must be a directory, never through a symlink.
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// A name or path as a C string; a NUL byte (which no file name holds) is `InvalidInput`.
fn c(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Wraps a new fd returned by a successful call.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Opens an absolute directory path the ordinary way (symlinks followed): only `/` is opened so.
pub(crate) fn open_root() -> io::Result<OwnedFd> {
    open_dir_path("/")
}

/// Opens `/` or `.` (the shim's working directory) as the start of a walk.
pub(crate) fn open_dir_path(start: &'static str) -> io::Result<OwnedFd> {
    let start = c(OsStr::new(start))?;
    // SAFETY: a valid C string and flags; the result is checked.
    owned(unsafe { libc::open(start.as_ptr(), DIR_FLAGS) }.into())
}

/// Opens the directory `name` in `parent`, refusing a symlink or any other non-directory
/// (`ENOTDIR`: `O_DIRECTORY` is checked on the symlink itself, which `O_NOFOLLOW` does not follow).
pub(crate) fn open_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let name = c(name)?;
    // SAFETY: a valid fd and C string; the result is checked.
    owned(unsafe { libc::openat(parent.as_raw_fd(), name.as_ptr(), DIR_FLAGS) }.into())
}

/// Opens the file `name` in `parent` for reading, never through a symlink, and without blocking on
/// a FIFO: the caller checks what it opened is a regular file.
pub(crate) fn open_file_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    let name = c(name)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a valid fd and C string; the result is checked.
    let fd = owned(unsafe { libc::openat(parent.as_raw_fd(), name.as_ptr(), flags) }.into())?;
    Ok(File::from(fd))
}

/// `struct open_how` of `openat2(2)` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens the directory at the relative `path` below `root` with `openat2`, which refuses any
/// symlink on the way (`ELOOP`; `ENOTDIR` for a symlink as the last component), any `..` or absolute path leaving `root` (`EXDEV`) and magic
/// links. `ENOSYS` (kernel before 5.6, or a seccomp filter) means the caller walks instead.
pub(crate) fn open_dir_beneath(root: BorrowedFd<'_>, path: &OsStr) -> io::Result<OwnedFd> {
    let path = c(path)?;
    let how = OpenHow {
        flags: DIR_FLAGS as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 reads `how` (of the size given) and the C string; the result is checked.
    owned(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// Creates the directory `name` in `parent`.
pub(crate) fn mkdir_at(parent: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = c(name)?;
    // SAFETY: a valid fd and C string.
    cvt(unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// Creates the regular file `name` in `parent` for writing; fails if anything (a symlink
/// included) is already there.
pub(crate) fn create_file_at(parent: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<File> {
    let name = c(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid fd and C string; the mode is passed as the variadic argument.
    let fd = owned(unsafe { libc::openat(parent.as_raw_fd(), name.as_ptr(), flags, mode) }.into())?;
    Ok(File::from(fd))
}

/// Creates the symlink `name` in `parent`, pointing at `target` (stored as given).
pub(crate) fn symlink_at(target: &OsStr, parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let (target, name) = (c(target)?, c(name)?);
    // SAFETY: a valid fd and C strings.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), parent.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// Hard-links `from_name` in `from` as `to_name` in `to`; a symlink at `from_name` is linked
/// itself, not followed.
pub(crate) fn link_at(
    from: BorrowedFd<'_>,
    from_name: &OsStr,
    to: BorrowedFd<'_>,
    to_name: &OsStr,
) -> io::Result<()> {
    let (a, b) = (c(from_name)?, c(to_name)?);
    // SAFETY: valid fds and C strings; flags 0 never follows a symlink.
    cvt(unsafe { libc::linkat(from.as_raw_fd(), a.as_ptr(), to.as_raw_fd(), b.as_ptr(), 0) })
        .map(drop)
}

/// Removes `name` from `parent`: an empty directory when `dir`, else anything but a directory.
pub(crate) fn unlink_at(parent: BorrowedFd<'_>, name: &OsStr, dir: bool) -> io::Result<()> {
    let name = c(name)?;
    let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: a valid fd and C string.
    cvt(unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// How [`rename_at`] treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rename {
    /// Atomically replaces it (as `rename(2)`).
    Replace,
    /// Fails with `EEXIST` if anything is there.
    NoReplace,
    /// Atomically swaps the two names (both must exist).
    Exchange,
}

/// Renames `from_name` in `from` to `to_name` in `to`; symlinks are moved, never followed.
pub fn rename_at(
    from: BorrowedFd<'_>,
    from_name: &OsStr,
    to: BorrowedFd<'_>,
    to_name: &OsStr,
    how: Rename,
) -> io::Result<()> {
    let (a, b) = (c(from_name)?, c(to_name)?);
    let flags = match how {
        Rename::Replace => 0,
        Rename::NoReplace => libc::RENAME_NOREPLACE,
        Rename::Exchange => libc::RENAME_EXCHANGE,
    };
    // SAFETY: valid fds and C strings (the raw syscall: older musl lacks the wrapper).
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from.as_raw_fd(),
            a.as_ptr(),
            to.as_raw_fd(),
            b.as_ptr(),
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What kind of file a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

/// The metadata of a name, not following a symlink: what an archive header and its validator
/// need (PROTOCOL.md 4.8.1), read by `fstatat` relative to a directory fd, never by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// Its kind.
    pub(crate) kind: Kind,
    /// Permission bits, setuid/setgid/sticky included.
    pub(crate) mode: u32,
    /// Owner.
    pub(crate) uid: u32,
    /// Group.
    pub(crate) gid: u32,
    /// Bytes (a regular file's length, a symlink's target's).
    pub(crate) size: u64,
    /// Device and inode: what identifies the file while it exists.
    pub(crate) dev: u64,
    /// See `dev`.
    pub(crate) ino: u64,
    /// Hard links.
    pub(crate) nlink: u64,
    /// Modification time: seconds and nanoseconds.
    pub(crate) mtime: (i64, i64),
    /// Change time (moved by any write or metadata change): seconds and nanoseconds.
    pub(crate) ctime: (i64, i64),
}

impl Stat {
    #[allow(
        clippy::unnecessary_cast,
        reason = "nlink_t is 64 bits on x86_64, 32 on aarch64"
    )]
    fn of(st: &libc::stat) -> Stat {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        Stat {
            kind,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` of `name` in `parent`.
pub(crate) fn stat_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<Stat> {
    let name = c(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: valid fd, C string and out-pointer; `st` is read only on success.
    cvt(unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded, so it filled the struct.
    Ok(Stat::of(&unsafe { st.assume_init() }))
}

/// `fstat` of an open file or directory.
pub(crate) fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid fd and out-pointer; `st` is read only on success.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled the struct.
    Ok(Stat::of(&unsafe { st.assume_init() }))
}

/// The target of the symlink `name` in `parent`, as stored (at most `PATH_MAX` bytes).
pub(crate) fn read_link_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    let name = c(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: a valid fd and C string; the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::readlinkat(
            parent.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// Changes the owner of `name` in `parent` itself (a symlink's own owner, not its target's).
pub(crate) fn lchown_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    uid: u32,
    gid: u32,
) -> io::Result<()> {
    let name = c(name)?;
    // SAFETY: a valid fd and C string.
    cvt(unsafe {
        libc::fchownat(
            parent.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// Sets the mtime of `name` in `parent` itself (a symlink's own, not its target's), to whole
/// `secs` since the epoch; the access time is left as it is.
pub(crate) fn set_mtime_at(parent: BorrowedFd<'_>, name: &OsStr, secs: i64) -> io::Result<()> {
    let name = c(name)?;
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    let times = [
        omit,
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a valid fd, C string and a two-element array the kernel only reads.
    cvt(unsafe {
        libc::utimensat(
            parent.as_raw_fd(),
            name.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// The names in a directory, `.` and `..` left out. Reads through a new open of `.` in `dir`, so
/// the caller's fd (and its offset) is untouched.
pub(crate) fn dir_names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    // SAFETY: a valid fd and C string; the result is checked.
    let dup = owned(unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), DIR_FLAGS) }.into())?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(dup);
    // SAFETY: `raw` is a valid directory fd whose ownership passes to the DIR stream.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let err = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(err);
    }
    let mut names = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; clearing it tells end-of-stream from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is a valid, open DIR stream used by this thread only.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let err = io::Error::last_os_error();
            break if err.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(err)
            };
        }
        // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(OsString::from_vec(bytes.to_vec()));
        }
    };
    // SAFETY: closes the stream and the fd it owns, once.
    unsafe { libc::closedir(stream) };
    result.map(|()| names)
}

/// 8 random bytes from the kernel, for names nobody can predict.
pub(crate) fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::syscall(libc::SYS_getrandom, b.as_mut_ptr(), b.len(), 0) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests;
