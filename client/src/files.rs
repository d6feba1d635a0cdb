//! Uploads with an owner and removals (PROTOCOL.md 4.8.2, 4.8.3): another `impl ShimClient`
//! beside the plain `files_in` and `files_out` of `lib.rs`.

use http::Method;
use protocol::owner::Owner;
use protocol::{query, routes};

use crate::transport::full_body;
use crate::{ClientError, ReqBody, ShimClient};

impl ShimClient {
    /// `PUT /v1/files?path=DIR&owner=UID:GID`: every extracted entry, and every directory the
    /// upload creates (`DIR` too when it did not exist), owned by `owner` (`None`: as
    /// [`ShimClient::files_in`]). An owner the shim may not give is 403 `owner_not_permitted`.
    pub async fn files_in_as(
        &self,
        dir: &str,
        owner: Option<Owner>,
        tar: ReqBody,
    ) -> Result<(), ClientError> {
        let owner = owner.map(|o| o.to_string());
        let mut pairs = vec![(query::PATH, dir)];
        if let Some(o) = &owner {
            pairs.push((query::OWNER, o));
        }
        let q = format!("{}{}", routes::FILES, query::build(&pairs));
        self.send(Method::PUT, &q, tar).await.map(|_| ())
    }

    /// `DELETE /v1/files?path=P`: removes a file, a symlink (itself) or a whole tree without
    /// following any symlink. 404 `file_not_found` when nothing is at `P`.
    pub async fn remove_files(&self, path: &str) -> Result<(), ClientError> {
        let q = format!("{}{}", routes::FILES, query::build(&[(query::PATH, path)]));
        self.send(Method::DELETE, &q, full_body(bytes::Bytes::new()))
            .await
            .map(|_| ())
    }
}
