//! `Authorization: Basic` for the image routes: the grant token travels as the password (what a
//! kubelet sends from an image pull secret), in standard base64.

/// Decodes standard base64 (with or without padding): `None` on anything else. For the password
/// of `Authorization: Basic`.
pub fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    (bits < 6).then_some(out)
}

/// Standard base64 with padding.
pub fn base64_encode(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (u32::from(c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An `Authorization: Basic` value for `user` and `password`.
pub fn basic_credentials(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64_encode(format!("{user}:{password}").as_bytes())
    )
}

/// The password of an `Authorization: Basic` value (the user is ignored), if it is one.
pub fn basic_password(value: &[u8]) -> Option<Vec<u8>> {
    let rest = value
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"basic "))
        .map(|_| value[6..].trim_ascii())?;
    let plain = base64_decode(rest)?;
    let at = plain.iter().position(|&b| b == b':')?;
    Some(plain[at + 1..].to_vec())
}
