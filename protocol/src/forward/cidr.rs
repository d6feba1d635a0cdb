//! IPv4 networks in CIDR notation (`10.244.0.0/16`): the pod networks a forwarder's request may
//! name a source in. IPv6 is refused: the image reference carries the address as a path
//! component, and pod IPs the forwarder serves are IPv4.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network: its address with the host bits cleared, and its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: u32,
    bits: u8,
}

/// Why a CIDR was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not `a.b.c.d/n`.
    #[error("not an IPv4 CIDR (a.b.c.d/n)")]
    Syntax,
    /// A prefix length over 32.
    #[error("prefix length over 32")]
    Prefix,
    /// Bits set after the prefix: probably a host address given by mistake.
    #[error("host bits set (the network is {0})")]
    HostBits(String),
}

impl Cidr {
    fn mask(bits: u8) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0)
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.bits) == self.net
    }

    /// Whether `ip` is the network's own address (host bits all 0) or its broadcast address (all
    /// 1): no pod's. A /31 or /32 has neither (RFC 3021: both of a /31's addresses are hosts).
    pub fn is_network_or_broadcast(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        self.bits <= 30 && (ip == self.net || ip == self.net | !Self::mask(self.bits))
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (ip, bits) = s.split_once('/').ok_or(CidrError::Syntax)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| CidrError::Syntax)?;
        if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) || bits.len() > 2 {
            return Err(CidrError::Syntax);
        }
        let bits: u8 = bits.parse().map_err(|_| CidrError::Syntax)?;
        if bits > 32 {
            return Err(CidrError::Prefix);
        }
        let net = u32::from(ip) & Self::mask(bits);
        if net != u32::from(ip) {
            let cidr = Cidr { net, bits };
            return Err(CidrError::HostBits(cidr.to_string()));
        }
        Ok(Cidr { net, bits })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.net), self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_contain_their_addresses_only() {
        let c: Cidr = "10.244.0.0/16".parse().unwrap();
        assert!(c.contains("10.244.3.7".parse().unwrap()));
        assert!(c.contains("10.244.255.255".parse().unwrap()));
        assert!(!c.contains("10.245.0.1".parse().unwrap()));
        assert!(!c.contains("127.0.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let one: Cidr = "192.0.2.1/32".parse().unwrap();
        assert!(one.contains("192.0.2.1".parse().unwrap()));
        assert!(!one.contains("192.0.2.2".parse().unwrap()));
        assert_eq!(c.to_string(), "10.244.0.0/16");
    }

    #[test]
    fn a_network_knows_its_own_and_its_broadcast_address() {
        let c: Cidr = "10.244.0.0/16".parse().unwrap();
        let edge = |cidr: &Cidr, ip: &str| cidr.is_network_or_broadcast(ip.parse().unwrap());
        assert!(edge(&c, "10.244.0.0") && edge(&c, "10.244.255.255"));
        assert!(!edge(&c, "10.244.0.1") && !edge(&c, "10.244.255.254"));
        assert!(!edge(&c, "10.245.0.0"), "another network's");
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(edge(&all, "0.0.0.0") && edge(&all, "255.255.255.255"));
        for hosts in ["192.0.2.0/31", "192.0.2.1/32"] {
            let c: Cidr = hosts.parse().unwrap();
            assert!(!edge(&c, "192.0.2.0") && !edge(&c, "192.0.2.1"), "{hosts}");
        }
    }

    #[test]
    fn malformed_networks_are_refused() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0/8",
            "fd00::/8",
            "10.0.0.0/+8",
            "x/8",
        ] {
            assert_eq!(bad.parse::<Cidr>(), Err(CidrError::Syntax), "{bad}");
        }
        assert_eq!("10.0.0.0/33".parse::<Cidr>(), Err(CidrError::Prefix));
        assert_eq!(
            "10.244.1.0/16".parse::<Cidr>(),
            Err(CidrError::HostBits("10.244.0.0/16".into()))
        );
    }
}
