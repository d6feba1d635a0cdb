//! Every `unsafe` call of the forwarder, behind one safe function: the IPv4 addresses the node's
//! interfaces hold, read with `getifaddrs(3)` (the forwarder runs in the host's network, so these
//! are the node's). The rest of the crate denies `unsafe`.
//!
//! Safety rule: the list `getifaddrs` returns is read only between that call and the one
//! `freeifaddrs`, never kept; each address is copied out as an [`Ipv4Addr`] after its family was
//! checked to be `AF_INET`, so the cast to `sockaddr_in` reads no more than the kernel wrote.
#![allow(unsafe_code)]

use std::io;
use std::net::Ipv4Addr;

/// The IPv4 addresses of every interface, up or down, and the broadcast address of those that
/// have one (a connection to either reaches the node). Sorted, without repeats.
pub fn interface_addresses() -> io::Result<Vec<Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid place for the list's pointer; on success the list is ours until
    // the `freeifaddrs` below.
    if unsafe { libc::getifaddrs(&mut head) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let entry = unsafe { &*at };
        found.extend(ipv4(entry.ifa_addr));
        if entry.ifa_flags & libc::IFF_BROADCAST as libc::c_uint != 0 {
            // With IFF_BROADCAST set, the union `ifa_ifu` is the broadcast address.
            found.extend(ipv4(entry.ifa_ifu));
        }
        at = entry.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing of the list is kept.
    unsafe { libc::freeifaddrs(head) };
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// The address `sa` points to, if it is IPv4 (`sa` may be null: an interface without one).
fn ipv4(sa: *const libc::sockaddr) -> Option<Ipv4Addr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null address of the list points to at least a `sockaddr`'s family field.
    if i32::from(unsafe { (*sa).sa_family }) != libc::AF_INET {
        return None;
    }
    // SAFETY: the family is AF_INET, so the kernel wrote a whole `sockaddr_in` there.
    let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
    Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_among_the_interfaces_addresses() {
        let all = interface_addresses().expect("getifaddrs");
        assert!(all.contains(&Ipv4Addr::LOCALHOST), "{all:?}");
        assert!(all.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
        assert!(
            !all.contains(&Ipv4Addr::new(127, 0, 0, 2)),
            "only the addresses interfaces hold, not every address routed to the node"
        );
    }

    #[test]
    fn only_ipv4_socket_addresses_are_read() {
        assert_eq!(ipv4(std::ptr::null()), None);
        let v4 = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::new(10, 244, 0, 1)).to_be(),
            },
            sin_zero: [0; 8],
        };
        let v6 = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: 0,
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr { s6_addr: [1; 16] },
            sin6_scope_id: 0,
        };
        let at = |p: *const u8| p.cast::<libc::sockaddr>();
        assert_eq!(
            ipv4(at((&raw const v4).cast())),
            Some(Ipv4Addr::new(10, 244, 0, 1))
        );
        assert_eq!(ipv4(at((&raw const v6).cast())), None);
    }
}
