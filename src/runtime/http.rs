//! The operator's two HTTP listeners: `/metrics` on one port and the probes (`/healthz`,
//! `/livez`, `/readyz`) on another, so that the metrics port can be closed to all but the
//! monitoring namespace (a NetworkPolicy) and require a bearer token ([`Authorizer`]) while
//! the kubelet's probes stay open. A minimal HTTP/1.1 responder on tokio (one request per
//! connection, `Connection: close`), enough for kubelet probes and Prometheus.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the endpoints answer with; called on each request.
pub(crate) trait Endpoints: Send + Sync + 'static {
    /// The Prometheus text exposition.
    fn metrics(&self) -> String;
    /// The process is alive and its loops are not wedged.
    fn healthy(&self) -> bool;
    /// The caches are synced and every watch still delivers (both replicas: the standby is
    /// ready to take over); else what is wrong.
    fn ready(&self) -> Result<(), String>;
}

/// Whether a scrape may read `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// No token, or one the API server does not accept: 401.
    Unauthenticated(String),
    /// A valid identity without `get` on `/metrics`: 403.
    Forbidden(String),
    /// The reviews could not be made: 503.
    Unavailable(String),
}

/// Decides on the bearer token of a `/metrics` request (`None`: no `Authorization: Bearer`).
pub(crate) trait Authorizer: Send + Sync + 'static {
    fn check(&self, token: Option<String>) -> BoxFuture<'static, Verdict>;
}

/// What one listener serves.
#[derive(Clone)]
pub(crate) enum Listener {
    /// `/healthz`, `/livez`, `/readyz`: never authenticated (the kubelet probes them).
    Probes,
    /// `/metrics`, behind the authorizer when there is one.
    Metrics(Option<Arc<dyn Authorizer>>),
}

const MAX_HEAD: usize = 8 * 1024;
const TEXT: &str = "text/plain; charset=utf-8";

/// Binds `addr` and serves `listener`'s endpoints until the runtime shuts down. Returns the
/// bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    endpoints: Arc<dyn Endpoints>,
    listener: Listener,
) -> std::io::Result<SocketAddr> {
    let socket = TcpListener::bind(addr).await?;
    let local = socket.local_addr()?;
    tokio::spawn(async move {
        loop {
            match socket.accept().await {
                Ok((stream, _)) => {
                    let (endpoints, listener) = (endpoints.clone(), listener.clone());
                    tokio::spawn(async move {
                        let served = tokio::time::timeout(
                            Duration::from_secs(10),
                            handle(stream, endpoints, listener),
                        );
                        if let Ok(Err(err)) = served.await {
                            tracing::debug!(error = %err, "http connection failed");
                        }
                    });
                }
                Err(err) => {
                    tracing::warn!(error = %err, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(local)
}

/// The response to one request line on `listener` (an authorized one, for `/metrics`):
/// (status line, content type, body).
pub(crate) fn route(
    method: &str,
    path: &str,
    endpoints: &dyn Endpoints,
    listener: &Listener,
) -> (&'static str, &'static str, String) {
    let path = path.split('?').next().unwrap_or(path);
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", TEXT, "method not allowed\n".into());
    }
    match (listener, path) {
        (Listener::Metrics(_), "/metrics") => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", endpoints.metrics())
        }
        (Listener::Probes, "/healthz" | "/livez") => match endpoints.healthy() {
            true => ("200 OK", TEXT, "ok\n".into()),
            false => ("503 Service Unavailable", TEXT, "unhealthy\n".into()),
        },
        (Listener::Probes, "/readyz") => match endpoints.ready() {
            Ok(()) => ("200 OK", TEXT, "ok\n".into()),
            Err(why) => ("503 Service Unavailable", TEXT, format!("{why}\n")),
        },
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

/// The response to a `/metrics` request the authorizer refused, if it did.
fn refusal(verdict: Verdict) -> Option<(&'static str, &'static str, String)> {
    match verdict {
        Verdict::Allowed => None,
        Verdict::Unauthenticated(why) => {
            Some(("401 Unauthorized", TEXT, format!("Unauthorized: {why}\n")))
        }
        Verdict::Forbidden(why) => Some(("403 Forbidden", TEXT, format!("Forbidden: {why}\n"))),
        Verdict::Unavailable(why) => {
            tracing::warn!(error = %why, "a /metrics request could not be authorized");
            Some(("503 Service Unavailable", TEXT, "the authorization check failed\n".into()))
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header among `lines`.
pub(crate) fn bearer<'a>(lines: impl Iterator<Item = &'a str>) -> Option<String> {
    lines.filter_map(|l| l.split_once(':')).find_map(|(name, value)| {
        let value = value.trim();
        let scheme = value.get(..7)?;
        (name.trim().eq_ignore_ascii_case("authorization")
            && scheme.eq_ignore_ascii_case("bearer "))
        .then(|| value[7..].trim().to_string())
    })
}

async fn handle(
    mut stream: TcpStream,
    endpoints: Arc<dyn Endpoints>,
    listener: Listener,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let mut parts = lines.next().unwrap_or("").split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("/");
    let refused = match &listener {
        Listener::Metrics(Some(authorizer)) if path.split('?').next() == Some("/metrics") => {
            let token = bearer(lines.take_while(|l| !l.is_empty()));
            refusal(authorizer.check(token).await)
        }
        _ => None,
    };
    let (status, content_type, body) =
        refused.unwrap_or_else(|| route(method, path, endpoints.as_ref(), &listener));
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(bool);
    impl Endpoints for Fixed {
        fn metrics(&self) -> String {
            "noderotation_leader 1\n".into()
        }
        fn healthy(&self) -> bool {
            true
        }
        fn ready(&self) -> Result<(), String> {
            if self.0 { Ok(()) } else { Err("caches not synced".into()) }
        }
    }

    /// Allows the token "good", forbids "other", knows no other.
    struct Tokens;
    impl Authorizer for Tokens {
        fn check(&self, token: Option<String>) -> BoxFuture<'static, Verdict> {
            Box::pin(async move {
                match token.as_deref() {
                    Some("good") => Verdict::Allowed,
                    Some("other") => Verdict::Forbidden("other may not get /metrics".into()),
                    Some(_) => Verdict::Unauthenticated("the token is not valid".into()),
                    None => Verdict::Unauthenticated("a bearer token is required".into()),
                }
            })
        }
    }

    #[test]
    fn probes_and_metrics_are_served_on_their_own_listeners() {
        let (probes, metrics) = (Listener::Probes, Listener::Metrics(None));
        assert_eq!(route("GET", "/healthz", &Fixed(false), &probes).0, "200 OK");
        assert_eq!(route("GET", "/readyz", &Fixed(false), &probes).0, "503 Service Unavailable");
        assert_eq!(route("GET", "/readyz", &Fixed(false), &probes).2, "caches not synced\n");
        assert_eq!(route("GET", "/readyz?verbose", &Fixed(true), &probes).0, "200 OK");
        assert_eq!(route("GET", "/metrics", &Fixed(true), &metrics).2, "noderotation_leader 1\n");
        assert_eq!(route("POST", "/metrics", &Fixed(true), &metrics).0, "405 Method Not Allowed");
        assert_eq!(route("GET", "/nope", &Fixed(true), &probes).0, "404 Not Found");
        // Each listener serves only its own endpoints.
        assert_eq!(route("GET", "/metrics", &Fixed(true), &probes).0, "404 Not Found");
        assert_eq!(route("GET", "/readyz", &Fixed(true), &metrics).0, "404 Not Found");
        assert_eq!(route("GET", "/healthz", &Fixed(true), &metrics).0, "404 Not Found");
    }

    #[test]
    fn the_bearer_token_is_read_from_the_authorization_header() {
        let head = "Host: x\r\nauthorization: Bearer  abc.def \r\nAccept: */*";
        assert_eq!(bearer(head.lines()).as_deref(), Some("abc.def"));
        assert_eq!(bearer("Authorization: Basic dXNlcjpwYXNz".lines()), None);
        assert_eq!(bearer("Host: x".lines()), None);
        assert_eq!(bearer("Authorization: bearer".lines()), None);
    }

    async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr).await?;
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n").as_bytes())
            .await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn serves_over_tcp() -> std::io::Result<()> {
        let local = "127.0.0.1:0".parse().map_err(std::io::Error::other)?;
        let addr = serve(local, Arc::new(Fixed(true)), Listener::Metrics(None)).await?;
        let out = get(addr, "/metrics", None).await?;
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nnoderotation_leader 1\n"), "{out}");
        Ok(())
    }

    #[tokio::test]
    async fn an_authorized_metrics_listener_answers_401_403_or_the_metrics() -> std::io::Result<()>
    {
        let local: SocketAddr = "127.0.0.1:0".parse().map_err(std::io::Error::other)?;
        let addr =
            serve(local, Arc::new(Fixed(true)), Listener::Metrics(Some(Arc::new(Tokens)))).await?;
        let out = get(addr, "/metrics", None).await?;
        assert!(out.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{out}");
        assert!(out.ends_with("Unauthorized: a bearer token is required\n"), "{out}");
        assert!(get(addr, "/metrics", Some("forged")).await?.starts_with("HTTP/1.1 401 "));
        let out = get(addr, "/metrics", Some("other")).await?;
        assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{out}");
        assert!(out.ends_with("Forbidden: other may not get /metrics\n"), "{out}");
        let out = get(addr, "/metrics", Some("good")).await?;
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("noderotation_leader 1\n"),
            "{out}"
        );
        // The probes are not behind the authorizer.
        let probes = serve(local, Arc::new(Fixed(true)), Listener::Probes).await?;
        assert!(get(probes, "/readyz", None).await?.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(get(probes, "/metrics", Some("good")).await?.starts_with("HTTP/1.1 404 "));
        Ok(())
    }
}
