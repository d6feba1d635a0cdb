//! Fuzzes what the shim parses out of a request line before authentication: the route and its
//! process id or property name, the query string, percent-decoding, and seconds. Nothing may panic;
//! a matched process route's id and property route's name must be valid (a name only of
//! `[A-Za-z0-9._:-]`, never `.` or `..`, so never a path of its own); decoding must invert encoding;
//! an owner (`UID:GID`) must be valid and print back as it parsed; request bodies must refuse
//! anything but a JSON object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::routes::{
    Route, percent_decode, percent_encode, property_path, query_pairs, valid_id,
    valid_property_name,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (path, query) = text.split_once('?').unwrap_or((text, ""));
    if let Ok(route) = Route::parse(path) {
        if let Route::Process(id) | Route::Output(id) | Route::Stdin(id) | Route::Signal(id)
        | Route::Resize(id) = route
        {
            assert!(valid_id(id), "{id:?}");
        }
        if let Route::Property(name) = route {
            assert!(valid_property_name(name), "{name:?}");
            assert!(!name.contains(['/', '%']) && name != "." && name != "..", "{name:?}");
            assert_eq!(Route::parse(&property_path(name)), Ok(Route::Property(name)));
        }
        let _ = route.label();
    }
    for (key, value) in query_pairs(query) {
        let _ = (key.len(), value);
    }
    if let Some(decoded) = percent_decode(text) {
        let _ = decoded;
    }
    assert_eq!(percent_decode(&percent_encode(text)).as_deref(), Some(text));
    if let Some(d) = protocol::query::parse_seconds(text) {
        assert!(text.bytes().all(|b| b.is_ascii_digit() || b == b'.'), "{text:?} -> {d:?}");
    }
    if let Some(owner) = protocol::owner::Owner::parse(text) {
        assert!(owner.is_valid(), "{text:?}");
        assert_eq!(protocol::owner::Owner::parse(&owner.to_string()), Some(owner));
        assert!(text.bytes().all(|b| b.is_ascii_digit() || b == b':'), "{text:?}");
    }
    // Bodies: whatever parses as a spawn, signal or resize request came from a JSON object.
    let object = serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object());
    if serde_json::from_str::<protocol::SpawnRequest>(text).is_ok()
        || serde_json::from_str::<protocol::SignalRequest>(text).is_ok()
        || serde_json::from_str::<protocol::TtySize>(text).is_ok()
        || serde_json::from_str::<protocol::owner::Owner>(text).is_ok()
        || serde_json::from_str::<protocol::artifacts::PullSpec>(text).is_ok()
    {
        assert!(object, "{text:?}");
    }
});
