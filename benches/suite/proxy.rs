//! A counting HTTP/1.1 proxy on loopback (the bench suite's, and `tests/apiserver.rs`'s record of
//! what the operator sends): the operator talks plain HTTP to it, it forwards to
//! `kubectl proxy` (which holds the credentials and the TLS connection to the API server) and
//! records every request the operator makes as (time, verb, resource). Requests are parsed
//! only enough to find their ends (Content-Length or chunked bodies); responses, watch streams
//! included, are copied through untouched. A test may hold one request before it is forwarded
//! ([`Proxy::hold_next`]), to make something happen between the operator's read and its write.
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// One request: `verb` is the HTTP method, with GET split into `get`, `list` and `watch`.
#[derive(Debug, Clone)]
pub struct Request {
    pub at: Instant,
    pub verb: String,
    pub resource: String,
    /// The request target as sent: path and query (`tests/apiserver.rs` reads the namespace and
    /// the query from it).
    #[allow(dead_code)]
    pub target: String,
}

impl Request {
    pub fn is_write(&self) -> bool {
        !matches!(self.verb.as_str(), "get" | "list" | "watch")
    }
}

#[derive(Default)]
pub struct Log {
    requests: Mutex<Vec<Request>>,
}

impl Log {
    /// Every request so far.
    #[allow(dead_code)]
    pub fn all(&self) -> Vec<Request> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn between(&self, from: Instant, to: Instant) -> Vec<Request> {
        let all = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter(|r| r.at >= from && r.at < to).cloned().collect()
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub log: Arc<Log>,
    stop: Arc<AtomicBool>,
    hold: Arc<Mutex<Option<Arc<Held>>>>,
}

/// One request held by the proxy until the test releases it.
#[allow(dead_code)]
pub struct Held {
    method: String,
    path: String,
    /// (reached, released)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

#[allow(dead_code)]
impl Held {
    /// Whether the request arrived (and waits).
    pub fn reached(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Forwards it.
    pub fn release(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.changed.notify_all();
    }

    fn matches(&self, method: &str, target: &str) -> bool {
        method == self.method && target.split('?').next().unwrap_or_default().ends_with(&self.path)
    }

    fn wait(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = true;
        self.changed.notify_all();
        while !st.1 {
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Proxy {
    pub fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let log = Arc::new(Log::default());
        let stop = Arc::new(AtomicBool::new(false));
        let hold = Arc::new(Mutex::new(None));
        let (l, s, h) = (Arc::clone(&log), Arc::clone(&stop), Arc::clone(&hold));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Acquire) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let (l, h) = (Arc::clone(&l), Arc::clone(&h));
                std::thread::spawn(move || {
                    let _ = serve(client, upstream, &l, &h);
                });
            }
        });
        Ok(Proxy { addr, log, stop, hold })
    }

    /// Holds the next request with this HTTP `method` whose path ends with `path` until the
    /// returned handle releases it (dropping the proxy does not).
    #[allow(dead_code)]
    pub fn hold_next(&self, method: &str, path: &str) -> Arc<Held> {
        let held = Arc::new(Held {
            method: method.to_string(),
            path: path.to_string(),
            state: Mutex::new((false, false)),
            changed: Condvar::new(),
        });
        *self.hold.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&held));
        held
    }
}

impl Proxy {
    /// A kubeconfig whose only cluster is this proxy (plain HTTP, no credentials: `kubectl
    /// proxy` behind it holds them).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: p, cluster: {{server: \"http://{}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: p, context: {{cluster: p, user: u}}}}]\n\
             current-context: p\n",
            self.addr
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }
}

type HoldSlot = Mutex<Option<Arc<Held>>>;

fn serve(client: TcpStream, upstream: SocketAddr, log: &Log, hold: &HoldSlot) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    let (mut to_client, mut from_server) = (client.try_clone()?, server.try_clone()?);
    let back = std::thread::spawn(move || {
        let _ = io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Write);
    });
    let mut reader = BufReader::new(client);
    let mut to_server = server;
    let result = forward_requests(&mut reader, &mut to_server, log, hold);
    let _ = to_server.shutdown(Shutdown::Write);
    let _ = back.join();
    result
}

fn forward_requests(
    reader: &mut BufReader<TcpStream>,
    out: &mut TcpStream,
    log: &Log,
    hold: &HoldSlot,
) -> io::Result<()> {
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line)? == 0 {
                return Ok(()); // the client closed the connection
            }
            let end = line == b"\r\n" || line == b"\n";
            head.extend_from_slice(&line);
            if end {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let (mut length, mut chunked) = (0u64, false);
        for l in lines {
            let Some((k, v)) = l.split_once(':') else { continue };
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                _ => {}
            }
        }
        if !method.is_empty() {
            let (verb, resource) = classify(&method, &target);
            let mut all = log.requests.lock().unwrap_or_else(|e| e.into_inner());
            all.push(Request { at: Instant::now(), verb, resource, target: target.clone() });
        }
        let held = {
            let mut slot = hold.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                Some(h) if h.matches(&method, &target) => slot.take(),
                _ => None,
            }
        };
        if let Some(h) = held {
            h.wait();
        }
        out.write_all(&head)?;
        if chunked {
            copy_chunked(reader, out)?;
        } else if length > 0 {
            let copied = io::copy(&mut reader.by_ref().take(length), out)?;
            if copied < length {
                return Ok(());
            }
        }
    }
}

fn copy_chunked(reader: &mut BufReader<TcpStream>, out: &mut TcpStream) -> io::Result<()> {
    loop {
        let mut size_line = Vec::new();
        reader.read_until(b'\n', &mut size_line)?;
        out.write_all(&size_line)?;
        let text = String::from_utf8_lossy(&size_line);
        let hex = text.trim().split(';').next().unwrap_or("0");
        let size = u64::from_str_radix(hex, 16).unwrap_or(0);
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let mut line = Vec::new();
                if reader.read_until(b'\n', &mut line)? == 0 {
                    return Ok(());
                }
                out.write_all(&line)?;
                if line == b"\r\n" || line == b"\n" {
                    return Ok(());
                }
            }
        }
        io::copy(&mut reader.by_ref().take(size + 2), out)?; // data and its CRLF
    }
}

/// (verb, resource) of a Kubernetes API request: GET splits into get (a name), list (a
/// collection) and watch (`watch=true`); the resource carries its subresource (`pods/binding`).
pub fn classify(method: &str, target: &str) -> (String, String) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segs.first() {
        Some(&"api") => segs.get(2..).unwrap_or_default(),
        Some(&"apis") => segs.get(3..).unwrap_or_default(),
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let resource = match rest {
        [] => path.to_string(),
        [r] | [r, _] => r.to_string(),
        [r, _, sub, ..] => format!("{r}/{sub}"),
    };
    let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match method {
        "GET" if watch => "watch".to_string(),
        "GET" if rest.len() == 1 => "list".to_string(),
        "GET" => "get".to_string(),
        m => m.to_ascii_lowercase(),
    };
    (verb, resource)
}
