//! The pod's properties (PROTOCOL.md 4.13): a small name to value store for the orchestrator, kept
//! in the shim's memory only, so the step's processes can neither read nor change it. Its count,
//! name length, value size and total bytes are bounded by the `STEPSHIM_PROPERTIES_*` settings; a
//! refused set leaves the store as it was.

use std::sync::Mutex;

use crate::error::Error;

/// The caps of the store (PROTOCOL.md 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Names at once.
    pub(crate) max_count: usize,
    /// Bytes of one name.
    pub(crate) max_name_bytes: usize,
    /// Bytes of one value.
    pub(crate) max_value_bytes: usize,
    /// Bytes of every name and value together.
    pub(crate) max_bytes: usize,
}

/// The store.
#[derive(Debug)]
pub(crate) struct Properties {
    limits: Limits,
    inner: Mutex<Store>,
}

/// Names and values in a vector sorted by name: a few hundred entries at most, and far less code in
/// the binary than a map's.
#[derive(Debug, Default)]
struct Store {
    /// Ordered by name, as `GET` lists them.
    entries: Vec<(String, String)>,
    /// Bytes of every name and value.
    bytes: usize,
}

impl Store {
    /// Where `name` is, or would be inserted.
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }
}

impl Properties {
    /// An empty store with these caps.
    pub(crate) fn new(limits: Limits) -> Self {
        Properties {
            limits,
            inner: Mutex::new(Store::default()),
        }
    }

    /// The caps.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// Checks a name's length (its characters were checked by the route): 400 `invalid_property`.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), Error> {
        if name.len() > self.limits.max_name_bytes {
            return Err(Error::InvalidProperty(
                "property name longer than STEPSHIM_PROPERTIES_MAX_NAME_BYTES",
            ));
        }
        Ok(())
    }

    /// Every property as a JSON object, name to value, ordered by name.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let store = self.lock();
        let mut out = Vec::with_capacity(store.bytes + 6 * store.entries.len() + 2);
        out.push(b'{');
        for (i, (name, value)) in store.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Writing into a vector cannot fail; strings always serialize.
            let _ = serde_json::to_writer(&mut out, name);
            out.push(b':');
            let _ = serde_json::to_writer(&mut out, value);
        }
        out.push(b'}');
        out
    }

    /// Sets `name` to `value`, replacing its value; 409 `properties_full` when a new name would be
    /// past the count, or the bytes past the total (a replaced value's bytes count as freed).
    pub(crate) fn set(&self, name: &str, value: String) -> Result<(), Error> {
        self.check_name(name)?;
        let mut store = self.lock();
        let at = store.find(name);
        let old = at.map_or(0, |i| name.len() + store.entries[i].1.len());
        if at.is_err() && store.entries.len() >= self.limits.max_count {
            return Err(Error::PropertiesFull(
                "STEPSHIM_PROPERTIES_MAX_COUNT properties are set; delete some first",
            ));
        }
        let bytes = store.bytes - old + name.len() + value.len();
        if bytes > self.limits.max_bytes {
            return Err(Error::PropertiesFull(
                "properties would take more than STEPSHIM_PROPERTIES_MAX_BYTES; delete some first",
            ));
        }
        match at {
            Ok(i) => store.entries[i].1 = value,
            Err(i) => store.entries.insert(i, (name.to_owned(), value)),
        }
        store.bytes = bytes;
        Ok(())
    }

    /// Removes `name`, if set.
    pub(crate) fn delete(&self, name: &str) {
        let mut store = self.lock();
        if let Ok(i) = store.find(name) {
            let (_, value) = store.entries.remove(i);
            store.bytes -= name.len() + value.len();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(max_count: usize, max_bytes: usize) -> Properties {
        Properties::new(Limits {
            max_count,
            max_name_bytes: 8,
            max_value_bytes: 100,
            max_bytes,
        })
    }

    #[test]
    fn sets_replace_and_deletes_free_their_bytes() {
        let p = store(2, 10);
        p.set("a", "1234".into()).unwrap();
        p.set("b", "1234".into()).unwrap();
        assert!(matches!(
            p.set("c", String::new()),
            Err(Error::PropertiesFull(_))
        ));
        // A replaced value's bytes are freed: 1 + 8 + 5 = 14 > 10, but 1 + 4 + 5 = 10 fits.
        assert!(matches!(
            p.set("a", "12345678".into()),
            Err(Error::PropertiesFull(_))
        ));
        p.set("b", "".into()).unwrap();
        p.set("a", "12345678".into()).unwrap();
        assert_eq!(p.to_json(), br#"{"a":"12345678","b":""}"#);
        p.delete("a");
        p.delete("a");
        p.set("c", "\u{0}\"\\".into()).unwrap();
        assert_eq!(p.to_json(), br#"{"b":"","c":"\u0000\"\\"}"#);
        assert!(matches!(
            p.set("123456789", "".into()),
            Err(Error::InvalidProperty(_))
        ));
        p.set("12345678", "".into()).unwrap_err();
    }
}
