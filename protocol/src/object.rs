//! Request bodies are JSON objects, never arrays. serde's derived `Deserialize` for a struct also
//! accepts a sequence of its fields in order (`["/bin/echo",["x"]]` for a spawn spec), which the
//! contract does not allow. A request type derives with `#[serde(remote = "Self")]` (so the derived
//! code becomes inherent `serialize`/`deserialize` functions) and [`object_only!`] implements the
//! traits: serializing as derived, deserializing only from a map, handed to the derived code.

/// Implements `Serialize` (as derived) and `Deserialize` (maps only) for a type derived with
/// `#[serde(remote = "Self")]`.
macro_rules! object_only {
    ($t:ident) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $t::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct ObjectOnly;
                impl<'de> serde::de::Visitor<'de> for ObjectOnly {
                    type Value = $t;

                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($t), ")"))
                    }

                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        map: A,
                    ) -> Result<$t, A::Error> {
                        $t::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    }
                }
                d.deserialize_map(ObjectOnly)
            }
        }
    };
}

pub(crate) use object_only;

#[cfg(test)]
mod tests {
    use crate::{ResizeRequest, SignalRequest, SignalSpec, SpawnRequest, TtySize};

    #[test]
    fn arrays_are_refused_where_objects_are_defined() {
        assert!(serde_json::from_str::<SpawnRequest>(r#"["/bin/echo",["x"]]"#).is_err());
        assert!(serde_json::from_str::<SignalRequest>(r#"["WINCH"]"#).is_err());
        assert!(serde_json::from_str::<ResizeRequest>("[80,24]").is_err());
        assert!(serde_json::from_str::<SpawnRequest>(r#"{"path":"x","tty":[80,24]}"#).is_err());
        assert!(serde_json::from_str::<SpawnRequest>(r#"{"path":"x","bogus":1}"#).is_err());
        let spec: SpawnRequest =
            serde_json::from_str(r#"{"path":"x","tty":{"cols":80,"rows":24}}"#).unwrap();
        assert_eq!(spec.tty, Some(TtySize { cols: 80, rows: 24 }));
        let back: SpawnRequest =
            serde_json::from_slice(&serde_json::to_vec(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        let sig: SignalRequest = serde_json::from_str(r#"{"signal":4294967311}"#).unwrap();
        assert_eq!(sig.signal, SignalSpec::Number(4294967311));
        for n in ["1e300", "-5", "18446744073709551616", "15.5"] {
            let sig: SignalRequest = serde_json::from_str(&format!(r#"{{"signal":{n}}}"#)).unwrap();
            assert_eq!(crate::signal::parse(&sig.signal), None, "{n}");
        }
    }
}
