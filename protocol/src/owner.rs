//! The numeric owner an upload or a pull gives every entry it writes (PROTOCOL.md 4.8.3):
//! `owner=UID:GID` in the query of `PUT /v1/files`, `{"uid":N,"gid":N}` in a pull's spec.

use serde::de::{Error, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// A user id and a group id, each below `u32::MAX` (which `chown(2)` reads as "leave unchanged").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// The fields, for errors.
const FIELDS: &[&str] = &["uid", "gid"];

impl<'de> Deserialize<'de> for Owner {
    /// From a JSON object with exactly `uid` and `gid`, like `object_only!` types: never an array.
    /// Written out rather than derived: the derived code with `object_only!` around it costs the
    /// shim's binary more for two fields.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Owner, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Owner;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object (Owner)")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Owner, A::Error> {
                let (mut uid, mut gid) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    let (slot, name) = match key.as_str() {
                        "uid" => (&mut uid, FIELDS[0]),
                        "gid" => (&mut gid, FIELDS[1]),
                        other => return Err(A::Error::unknown_field(other, FIELDS)),
                    };
                    if slot.replace(map.next_value::<u32>()?).is_some() {
                        return Err(A::Error::duplicate_field(name));
                    }
                }
                Ok(Owner {
                    uid: uid.ok_or_else(|| A::Error::missing_field("uid"))?,
                    gid: gid.ok_or_else(|| A::Error::missing_field("gid"))?,
                })
            }
        }
        d.deserialize_map(Fields)
    }
}

impl Owner {
    /// Whether both ids are usable: `u32::MAX` (-1) is not an id.
    pub fn is_valid(&self) -> bool {
        self.uid != u32::MAX && self.gid != u32::MAX
    }

    /// Parses the query form `UID:GID`: two decimal numbers of at most 10 digits each (no sign, no
    /// spaces), each a valid id. `None` for anything else.
    pub fn parse(s: &str) -> Option<Owner> {
        let (uid, gid) = s.split_once(':')?;
        let id = |d: &str| {
            if d.is_empty() || d.len() > 10 || !d.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            d.parse::<u32>().ok()
        };
        let owner = Owner {
            uid: id(uid)?,
            gid: id(gid)?,
        };
        owner.is_valid().then_some(owner)
    }
}

impl std::fmt::Display for Owner {
    /// The query form, `UID:GID`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_query_form_only() {
        assert_eq!(
            Owner::parse("1000:1001"),
            Some(Owner {
                uid: 1000,
                gid: 1001
            })
        );
        assert_eq!(Owner::parse("0:0"), Some(Owner { uid: 0, gid: 0 }));
        let max = Owner::parse("4294967294:4294967294").map(|o| o.to_string());
        assert_eq!(max.as_deref(), Some("4294967294:4294967294"));
        for bad in [
            "",
            ":",
            "1000",
            "1000:",
            ":1000",
            "-1:0",
            "+1:0",
            "1:2:3",
            " 1:2",
            "1:2 ",
            "1.0:2",
            "4294967295:0",
            "0:4294967295",
            "4294967296:0",
            "00000000001:1",
            "a:b",
            "１:2",
        ] {
            assert_eq!(Owner::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn json_is_an_object_of_two_ids() {
        let o: Owner = serde_json::from_str(r#"{"uid":1,"gid":2}"#).unwrap();
        assert_eq!(o, Owner { uid: 1, gid: 2 });
        assert_eq!(serde_json::to_string(&o).unwrap(), r#"{"uid":1,"gid":2}"#);
        for bad in [
            r#"[1,2]"#,
            r#"{"uid":1}"#,
            r#"{"gid":1}"#,
            r#"{"uid":1,"gid":2,"x":3}"#,
            r#"{"uid":-1,"gid":2}"#,
            r#"{"uid":1,"uid":1,"gid":2}"#,
            r#"{"uid":"1","gid":2}"#,
            r#"{"uid":4294967296,"gid":2}"#,
            r#"null"#,
        ] {
            assert!(serde_json::from_str::<Owner>(bad).is_err(), "{bad}");
        }
    }
}
