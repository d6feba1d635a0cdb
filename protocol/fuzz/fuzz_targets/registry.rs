//! Fuzzes what the shim parses for an image request (PROTOCOL.md 4.12) and out of an image
//! directory: `/v2/` paths, names, tags and digests, Basic credentials, and the `index.json`,
//! `metadata.json` and manifest documents a step writes. Nothing may panic; a parsed name must be
//! valid; a parsed digest must print back as it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::registry::{
    Index, Metadata, Reference, Request, SelfDescribed, base64_decode, base64_encode, basic_password,
    digest_string, parse, valid_name,
};

fuzz_target!(|data: &[u8]| {
    let _ = basic_password(data);
    let _ = base64_decode(data);
    assert_eq!(base64_decode(base64_encode(data).as_bytes()).as_deref(), Some(data));
    let _ = serde_json::from_slice::<Index>(data);
    let _ = serde_json::from_slice::<Metadata>(data);
    if let Ok(m) = serde_json::from_slice::<SelfDescribed>(data) {
        let _ = m.media_type();
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse(text) {
        Ok(Request::Manifest { name, reference }) => {
            assert!(valid_name(name), "{name:?}");
            if let Reference::Digest(d) = reference {
                assert!(text.ends_with(&digest_string(&d)), "{text:?}");
            }
        }
        Ok(Request::Blob { name, digest }) => {
            assert!(valid_name(name), "{name:?}");
            assert!(text.ends_with(&digest_string(&digest)), "{text:?}");
        }
        Ok(Request::Base) | Err(_) => {}
    }
});
