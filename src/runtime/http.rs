//! `/metrics`, `/healthz` and `/readyz` on one port: a minimal HTTP/1.1 responder on tokio
//! (one request per connection, `Connection: close`), enough for kubelet probes and Prometheus.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the endpoints answer with; called on each request.
pub trait Endpoints: Send + Sync + 'static {
    /// The Prometheus text exposition.
    fn metrics(&self) -> String;
    /// The process is alive and its loops are not wedged.
    fn healthy(&self) -> bool;
    /// The caches are synced and every watch still delivers (both replicas: the standby is
    /// ready to take over); else what is wrong.
    fn ready(&self) -> Result<(), String>;
}

const MAX_HEAD: usize = 8 * 1024;

/// Binds `addr` and serves until the runtime shuts down. Returns the bound address.
pub async fn serve(addr: SocketAddr, endpoints: Arc<dyn Endpoints>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let endpoints = endpoints.clone();
                    tokio::spawn(async move {
                        let served = tokio::time::timeout(
                            Duration::from_secs(10),
                            handle(stream, endpoints),
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

/// The response to one request line: (status line, content type, body).
pub fn route(
    method: &str,
    path: &str,
    endpoints: &dyn Endpoints,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let path = path.split('?').next().unwrap_or(path);
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", TEXT, "method not allowed\n".into());
    }
    match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", endpoints.metrics()),
        "/healthz" | "/livez" => match endpoints.healthy() {
            true => ("200 OK", TEXT, "ok\n".into()),
            false => ("503 Service Unavailable", TEXT, "unhealthy\n".into()),
        },
        "/readyz" => match endpoints.ready() {
            Ok(()) => ("200 OK", TEXT, "ok\n".into()),
            Err(why) => ("503 Service Unavailable", TEXT, format!("{why}\n")),
        },
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

async fn handle(mut stream: TcpStream, endpoints: Arc<dyn Endpoints>) -> std::io::Result<()> {
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
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("/");
    let (status, content_type, body) = route(method, path, endpoints.as_ref());
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

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/healthz", &Fixed(false)).0, "200 OK");
        assert_eq!(route("GET", "/readyz", &Fixed(false)).0, "503 Service Unavailable");
        assert_eq!(route("GET", "/readyz", &Fixed(false)).2, "caches not synced\n");
        assert_eq!(route("GET", "/readyz?verbose", &Fixed(true)).0, "200 OK");
        assert_eq!(route("GET", "/metrics", &Fixed(true)).2, "noderotation_leader 1\n");
        assert_eq!(route("POST", "/metrics", &Fixed(true)).0, "405 Method Not Allowed");
        assert_eq!(route("GET", "/nope", &Fixed(true)).0, "404 Not Found");
    }

    #[tokio::test]
    async fn serves_over_tcp() -> std::io::Result<()> {
        let addr =
            serve("127.0.0.1:0".parse().map_err(std::io::Error::other)?, Arc::new(Fixed(true)))
                .await?;
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nnoderotation_leader 1\n"), "{out}");
        Ok(())
    }
}
