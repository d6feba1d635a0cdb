//! The process routes of [`ShimClient`] (PROTOCOL.md 4.2 to 4.7 and 5.3): spawn (at once or waiting
//! for the exit), status, wait, list, stdin by offset, signals, terminal size, delete, and the
//! output stream from an offset.

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::routes::{self, process_path, process_sub_path};
use protocol::{Process, ProcessList, SignalRequest, SignalSpec, SpawnRequest, StdinAck, TtySize};

use crate::transport::full_body;
use crate::{ClientError, OutputStream, ShimClient};

impl ShimClient {
    /// `PUT /v1/processes/{id}`: the process, and whether this call started it.
    pub async fn spawn(
        &self,
        id: &str,
        spec: &SpawnRequest,
    ) -> Result<(Process, bool), ClientError> {
        let (status, p) = self
            .call(Method::PUT, &process_path(id), Self::json_body(spec))
            .await?;
        Ok((p, status == StatusCode::CREATED))
    }

    /// `PUT /v1/processes/{id}?wait=S`: spawns and waits up to `secs` for the exit in one request.
    /// A shim that does not know `wait` on a spawn answers at once; then the rest of the time is
    /// waited with `GET ?wait=`, so the result is the same against any shim.
    pub async fn spawn_wait(
        &self,
        id: &str,
        spec: &SpawnRequest,
        secs: u32,
    ) -> Result<(Process, bool), ClientError> {
        let started = std::time::Instant::now();
        let q = protocol::query::build(&[(protocol::query::WAIT, &secs.to_string())]);
        let (status, p): (_, Process) = self
            .call(
                Method::PUT,
                &format!("{}{q}", process_path(id)),
                Self::json_body(spec),
            )
            .await?;
        let created = status == StatusCode::CREATED;
        let rest = u64::from(secs).saturating_sub(started.elapsed().as_secs());
        if p.state == protocol::State::Exited || rest == 0 {
            return Ok((p, created));
        }
        Ok((self.wait(id, rest as u32).await?, created))
    }

    /// `GET /v1/processes/{id}`
    pub async fn get(&self, id: &str) -> Result<Process, ClientError> {
        Ok(self
            .call(Method::GET, &process_path(id), Bytes::new())
            .await?
            .1)
    }

    /// `GET /v1/processes/{id}?wait=S`: waits up to `secs` for exit.
    pub async fn wait(&self, id: &str, secs: u32) -> Result<Process, ClientError> {
        Ok(self
            .call(
                Method::GET,
                &format!("{}?wait={secs}", process_path(id)),
                Bytes::new(),
            )
            .await?
            .1)
    }

    /// `GET /v1/processes`
    pub async fn list(&self) -> Result<Vec<Process>, ClientError> {
        let (_, l): (_, ProcessList) = self
            .call(Method::GET, routes::PROCESSES, Bytes::new())
            .await?;
        Ok(l.processes)
    }

    /// `POST /v1/processes/{id}/stdin?offset=M[&eof=1]`
    pub async fn stdin(
        &self,
        id: &str,
        offset: u64,
        data: Bytes,
        eof: bool,
    ) -> Result<StdinAck, ClientError> {
        let q = format!(
            "{}?offset={offset}{}",
            process_sub_path(id, "stdin"),
            if eof { "&eof=1" } else { "" }
        );
        Ok(self.call(Method::POST, &q, data).await?.1)
    }

    /// `POST /v1/processes/{id}/signal`
    pub async fn signal(&self, id: &str, signal: &str) -> Result<Process, ClientError> {
        let body = SignalRequest {
            signal: SignalSpec::Name(signal.to_owned()),
        };
        Ok(self
            .call(
                Method::POST,
                &process_sub_path(id, "signal"),
                Self::json_body(&body),
            )
            .await?
            .1)
    }

    /// `POST /v1/processes/{id}/resize`
    pub async fn resize(&self, id: &str, size: TtySize) -> Result<Process, ClientError> {
        Ok(self
            .call(
                Method::POST,
                &process_sub_path(id, "resize"),
                Self::json_body(&size),
            )
            .await?
            .1)
    }

    /// `DELETE /v1/processes/{id}[?force=1]`
    pub async fn delete(&self, id: &str, force: bool) -> Result<(), ClientError> {
        let q = format!(
            "{}{}",
            process_path(id),
            if force { "?force=1" } else { "" }
        );
        self.exchange(Method::DELETE, &q, Bytes::new())
            .await
            .map(|_| ())
    }

    /// `GET /v1/processes/{id}/output?offset=N[&follow=1]` as a frame stream (no resume).
    pub async fn output(
        &self,
        id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<OutputStream, ClientError> {
        let q = format!(
            "{}?offset={offset}{}",
            process_sub_path(id, "output"),
            if follow { "&follow=1" } else { "" }
        );
        let resp = self.send(Method::GET, &q, full_body(Bytes::new())).await?;
        Ok(OutputStream::new(resp.into_body(), offset))
    }
}
