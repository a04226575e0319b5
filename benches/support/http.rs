//! One HTTP/1.1 answer read off a kept-alive connection, as the benches' clients need it.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The head (status line and headers) and the body of the next answer on `stream`, the body as
/// long as its `Content-Length` says (none: empty).
pub(crate) async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(String, String)> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Ok((head, String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned()));
            }
        }
    }
}
