//! The pod's properties (PROTOCOL.md 4.13): a name to value store in the shim's memory, which the
//! step's processes cannot see.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::Method;
use protocol::routes;

use crate::{ClientError, ShimClient};

impl ShimClient {
    /// `GET /v1/properties`: every property, name to value.
    pub async fn properties(&self) -> Result<BTreeMap<String, String>, ClientError> {
        Ok(self
            .call(Method::GET, routes::PROPERTIES, Bytes::new())
            .await?
            .1)
    }

    /// `PUT /v1/properties/{name}`: sets `name` to `value`. The shim refuses a name outside
    /// `[A-Za-z0-9._:-]+` (sent as is, never escaped) with 400 `invalid_property`.
    pub async fn set_property(&self, name: &str, value: &str) -> Result<(), ClientError> {
        let path = routes::property_path(name);
        let value = Bytes::copy_from_slice(value.as_bytes());
        self.exchange(Method::PUT, &path, value).await.map(|_| ())
    }

    /// `DELETE /v1/properties/{name}`: removes `name`; one that is not set is no error.
    pub async fn delete_property(&self, name: &str) -> Result<(), ClientError> {
        let path = routes::property_path(name);
        self.exchange(Method::DELETE, &path, Bytes::new())
            .await
            .map(|_| ())
    }
}
