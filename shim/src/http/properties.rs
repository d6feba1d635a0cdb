//! Handlers of the property routes (PROTOCOL.md 4.13): `GET /v1/properties` lists, `PUT` and
//! `DELETE /v1/properties/{name}` set and remove one. The store is [`crate::properties`].

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::App;
use super::body::{Body, empty, full, read_limited};
use crate::error::Error;

/// `GET /v1/properties`: a JSON object, name to value.
pub(crate) fn list(app: &App) -> Response<Body> {
    let mut r = Response::new(full(app.properties.to_json()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// `/v1/properties/{name}`: `PUT` sets it to the body (UTF-8, at most the value limit), `DELETE`
/// removes it.
pub(crate) async fn property(
    app: &App,
    name: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let props = &app.properties;
    match *req.method() {
        Method::PUT => {
            props.check_name(name)?;
            let bytes = read_limited(req.into_body(), props.limits().max_value_bytes).await?;
            let value = std::str::from_utf8(&bytes)
                .map_err(|_| Error::InvalidProperty("a property value must be UTF-8"))?;
            props.set(name, value.to_owned())?;
        }
        Method::DELETE => {
            props.check_name(name)?;
            props.delete(name);
        }
        _ => return Err(Error::MethodNotAllowed("PUT, DELETE")),
    }
    Ok(empty(StatusCode::NO_CONTENT))
}
