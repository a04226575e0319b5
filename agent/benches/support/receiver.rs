//! A remote write receiver for the memory bench: it takes every push.

use std::io::Write;
use std::sync::Arc;

/// A remote write receiver that takes every push (204): its URL, and how many it took.
pub(crate) fn receiver() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}/api/v1/write", listener.local_addr().expect("an address"));
    let pushes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = pushes.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut length = 0;
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 0) && !header.trim_end().is_empty() {
                if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                header.clear();
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let _ = reader.get_mut().write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
        }
    });
    (url, pushes)
}
