//! Test support for object storage, a dev-only crate (a dev-dependency of the storage crate, the
//! engine and the CLI; nothing ships it): a real S3-compatible server on 127.0.0.1 (moto's server, started from
//! the repository's `.venv`, which `make setup` fills), and a fault-injecting HTTP proxy to put
//! between the client and it.
//!
//! The server is one child process per test process, started on first use; it exits when the
//! test process does (it waits for its standard input to close). Each test uses buckets of its
//! own, so tests can run in parallel.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use stokehold_storage::remote::RemoteStore;

/// The moto server of this test process, or an `s3s-fs` server ([`S3Server::start_s3s_fs`]).
#[derive(Debug)]
pub struct S3Server {
    port: u16,
    child: Child,
    _stdin: Mutex<ChildStdin>,
    /// s3s-fs: the directory it serves (a bucket is a folder in it).
    root: Option<PathBuf>,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        // moto exits when its standard input closes; s3s-fs has to be stopped
        if self.root.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The Python with moto: `STOKEHOLD_TEST_PYTHON`, else the repository's `.venv`.
fn python() -> PathBuf {
    std::env::var_os("STOKEHOLD_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"))
}

const MOTO: &str = r#"
import os, sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the test process exits
os._exit(0)
"#;

impl S3Server {
    /// The server, started on first use. Panics (this is test code) with what to do when moto is
    /// not installed.
    pub fn shared() -> &'static S3Server {
        static SERVER: OnceLock<S3Server> = OnceLock::new();
        SERVER.get_or_init(|| {
            S3Server::start().unwrap_or_else(|e| {
                panic!(
                    "cannot start the S3 test server (moto) with {}: {e}. Run the tests with \
                     `make test-rust` (it installs moto[server] into .venv first), set \
                     STOKEHOLD_TEST_PYTHON to a Python with moto[server], or leave the S3 \
                     tests out with `make check` (`cargo test -- --skip s3`)",
                    python().display()
                )
            })
        })
    }

    fn start() -> io::Result<S3Server> {
        let mut child = Command::new(python())
            .args(["-c", MOTO])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let port = line.trim().parse().map_err(|_| {
            io::Error::other(format!("moto did not print its port (printed {line:?})"))
        })?;
        Ok(S3Server {
            port,
            child,
            _stdin: Mutex::new(stdin),
            root: None,
        })
    }

    /// Start the `s3s-fs` binary at `binary` (a Rust S3 server on a local directory,
    /// `cargo install s3s-fs --features binary`; far faster than moto, for benchmarks) serving
    /// `root` on 127.0.0.1, with the credentials of [`options`].
    pub fn start_s3s_fs(binary: &Path, root: &Path) -> io::Result<S3Server> {
        std::fs::create_dir_all(root)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new(binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", TEST_KEY, "--secret-key", TEST_SECRET])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let server = S3Server {
            port,
            child,
            _stdin: Mutex::new(stdin),
            root: Some(root.to_path_buf()),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(server.addr()).is_err() {
            if std::time::Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "{} did not listen on {} within 20 s",
                    binary.display(),
                    server.addr()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// Which server this is: "moto" or "s3s-fs".
    pub fn kind(&self) -> &'static str {
        if self.root.is_some() {
            "s3s-fs"
        } else {
            "moto"
        }
    }

    /// The server process's id (benchmarks read its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Create `bucket` (moto accepts unsigned requests; for s3s-fs a bucket is a folder).
    pub fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        if let Some(root) = &self.root {
            return std::fs::create_dir_all(root.join(bucket));
        }
        let mut s = TcpStream::connect(self.addr())?;
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr()
        )?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        if resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200") {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "creating bucket {bucket}: {resp}"
            )))
        }
    }
}

/// The test servers' access key.
pub const TEST_KEY: &str = "stokehold-test";
/// The test servers' secret key.
pub const TEST_SECRET: &str = "stokehold-test-secret";

/// Storage options for a test server (or a proxy in front of it) at `endpoint`.
pub fn options(endpoint: &str) -> BTreeMap<String, String> {
    [
        ("key", TEST_KEY),
        ("secret", TEST_SECRET),
        ("region_name", "us-east-1"),
        ("endpoint_url", endpoint),
        ("allow_http", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Upload `bytes` as `name` under the dataset URL of `store`.
pub fn put(store: &Arc<RemoteStore>, name: &str, bytes: Vec<u8>) -> io::Result<()> {
    store.put_object(name, bytes)
}

/// The names of the objects under the dataset URL `url`, sorted.
pub fn names(url: &str, options: &BTreeMap<String, String>) -> io::Result<Vec<String>> {
    let store = RemoteStore::open(url, options).map_err(io::Error::other)?;
    Ok(store.list()?.into_keys().collect())
}

/// Upload every file of the directory `dir` (not recursive) under `url`.
pub fn upload_dir(dir: &Path, url: &str, options: &BTreeMap<String, String>) -> io::Result<()> {
    let store = RemoteStore::open(url, options).map_err(io::Error::other)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            put(&store, &name, std::fs::read(entry.path())?)?;
        }
    }
    Ok(())
}

/// What the proxy does to the next requests. Body faults apply to GET responses with a partial
/// body (status 206) of at least 2 bytes, and cut them after half their bytes.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Added before every request is forwarded.
    pub delay: Duration,
    /// The next N GETs are answered `503 SlowDown` without reaching the server.
    pub fail_gets: u32,
    /// The next N writes (PUT and POST: objects, parts, multipart create and complete) are
    /// answered `503 SlowDown` without reaching the server.
    pub fail_writes: u32,
    /// The next N ranged GET responses are reset (TCP RST) halfway through the body.
    pub reset_bodies: u32,
    /// The next N ranged GET responses are closed (FIN) halfway through the body.
    pub cut_bodies: u32,
    /// The next N ranged GET responses are complete HTTP responses with only half their body
    /// (`Content-Length` rewritten): a short body that no transport error reveals.
    pub short_bodies: u32,
}

/// A fault-injecting HTTP/1.1 proxy (plain TCP) in front of a server: the client's connection is
/// kept alive between requests, as a real store's would be (a connection that a fault cut, or a
/// response with no length, is closed); each request goes upstream on a connection of its own.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    injected: Arc<AtomicU64>,
    /// CPU nanoseconds its connection threads have used serving requests (benchmarks subtract
    /// the proxy from the process's CPU).
    cpu_ns: Arc<AtomicU64>,
}

impl FaultProxy {
    /// Listen on 127.0.0.1 and forward to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Mutex::new(Faults::default()));
        let injected = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let (f, n, cpu) = (faults.clone(), injected.clone(), cpu_ns.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (f, n, cpu) = (f.clone(), n.clone(), cpu.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, upstream, &f, &n, &cpu);
                });
            }
        });
        Ok(FaultProxy {
            addr,
            faults,
            injected,
            cpu_ns,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replace the faults to inject.
    pub fn set(&self, faults: Faults) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// CPU seconds the proxy has used so far (counted after each request it served), or `None`
    /// where the kernel does not say (`/proc/thread-self/schedstat`).
    pub fn cpu_secs(&self) -> Option<f64> {
        thread_cpu_ns()?;
        Some(self.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

/// The calling thread's CPU time in nanoseconds (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Take one from a fault counter.
fn take(n: &mut u32) -> bool {
    let hit = *n > 0;
    *n = n.saturating_sub(1);
    hit
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// `head` (a request or response head, without its blank line) with its `Connection` header
/// replaced by `Connection: close`, and `Content-Length` by `len` when given.
fn rewrite(head: &str, len: Option<usize>) -> String {
    rewrite_as(head, len, true)
}

/// [`rewrite`], or without any `Connection` header (HTTP/1.1: kept alive) when `close` is false.
fn rewrite_as(head: &str, len: Option<usize>, close: bool) -> String {
    let mut out = String::new();
    for (i, l) in head.lines().enumerate() {
        let name = l
            .split_once(':')
            .map(|(k, _)| k.trim().to_ascii_lowercase());
        match name.as_deref() {
            _ if i == 0 => {}
            Some("connection") => continue,
            Some("content-length") if len.is_some() => continue,
            _ => {}
        }
        out.push_str(l);
        out.push_str("\r\n");
    }
    if let Some(n) = len {
        out.push_str(&format!("Content-Length: {n}\r\n"));
    }
    if close {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    out
}

/// Serve the requests of one client connection until it or a fault closes it.
fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    faults: &Mutex<Faults>,
    injected: &AtomicU64,
    cpu_ns: &AtomicU64,
) -> io::Result<()> {
    // a kept-alive connection must not hold a response's last piece back for the client's
    // delayed ACK (Nagle's algorithm): ~40 ms per request
    client.set_nodelay(true)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let mut cpu = thread_cpu_ns();
    loop {
        let more = serve_one(&mut reader, &mut client, upstream, faults, injected);
        if let (Some(before), Some(now)) = (cpu, thread_cpu_ns()) {
            cpu_ns.fetch_add(now.saturating_sub(before), Ordering::Relaxed);
            cpu = Some(now);
        }
        if !more? {
            return Ok(());
        }
    }
}

/// Serve one request of `client`; whether its connection stays open for another.
fn serve_one(
    reader: &mut BufReader<TcpStream>,
    client: &mut TcpStream,
    upstream: SocketAddr,
    faults: &Mutex<Faults>,
    injected: &AtomicU64,
) -> io::Result<bool> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(false);
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let len: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let is_get = head.starts_with("GET ");
    let plan = {
        let mut f = faults.lock().unwrap_or_else(|p| p.into_inner());
        let delay = f.delay;
        let is_write = head.starts_with("PUT ") || head.starts_with("POST ");
        let fail = (is_get && take(&mut f.fail_gets)) || (is_write && take(&mut f.fail_writes));
        (delay, fail, f.clone())
    };
    let (delay, fail, _) = plan;
    std::thread::sleep(delay);
    let client_closes =
        header(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    if fail {
        injected.fetch_add(1, Ordering::Relaxed);
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                   <Message>Please reduce your request rate.</Message></Error>";
        write!(
            client,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n\
             Content-Length: {}\r\n\r\n{xml}",
            xml.len()
        )?;
        return Ok(!client_closes);
    }
    let mut up = TcpStream::connect(upstream)?;
    up.set_nodelay(true)?;
    up.write_all(rewrite(&head, None).as_bytes())?;
    up.write_all(&body)?;
    let mut resp = Vec::new();
    up.read_to_end(&mut resp)?;
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io::Error::other("no response head"))?;
    let rhead = String::from_utf8_lossy(&resp[..split]).into_owned();
    let rbody = &resp[split + 4..];
    let partial = is_get
        && rhead.split(' ').nth(1) == Some("206")
        && header(&rhead, "transfer-encoding").is_none()
        && rbody.len() >= 2;
    enum Cut {
        None,
        Reset,
        Fin,
        Short,
    }
    let cut = if partial {
        let mut f = faults.lock().unwrap_or_else(|p| p.into_inner());
        if take(&mut f.reset_bodies) {
            Cut::Reset
        } else if take(&mut f.cut_bodies) {
            Cut::Fin
        } else if take(&mut f.short_bodies) {
            Cut::Short
        } else {
            Cut::None
        }
    } else {
        Cut::None
    };
    let half = rbody.len() / 2;
    // kept alive only when the client can tell where the response ends: a length, chunks, or
    // no body by its status or method
    let status = rhead.split(' ').nth(1).unwrap_or("");
    let framed = header(&rhead, "content-length").is_some()
        || header(&rhead, "transfer-encoding").is_some()
        || head.starts_with("HEAD ")
        || status == "204"
        || status == "304";
    let keep = framed && !client_closes;
    match cut {
        Cut::None => {
            client.write_all(rewrite_as(&rhead, None, !keep).as_bytes())?;
            client.write_all(rbody)?;
            return Ok(keep);
        }
        Cut::Short => {
            injected.fetch_add(1, Ordering::Relaxed);
            client.write_all(rewrite_as(&rhead, Some(half), !keep).as_bytes())?;
            client.write_all(&rbody[..half])?;
            return Ok(keep);
        }
        Cut::Fin | Cut::Reset => {
            injected.fetch_add(1, Ordering::Relaxed);
            client.write_all(rewrite(&rhead, None).as_bytes())?;
            client.write_all(&rbody[..half])?;
            client.flush()?;
            if matches!(cut, Cut::Reset) {
                // A zero linger makes close send RST instead of FIN.
                rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO))?;
            } else {
                client.shutdown(std::net::Shutdown::Both)?;
            }
        }
    }
    Ok(false)
}
