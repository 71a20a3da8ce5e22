//! A TCP relay: every connection it accepts is copied, byte for byte and in both directions, to one upstream
//! address. It parses nothing, so between the load generator and the sink it is the cheapest hop there is:
//! what it reaches bounds what any collector in that place can reach on the same machine (the `bench`
//! command's relay target, BENCHMARKS.md row 10a).

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// Relays every connection accepted on `listener` to `upstream` until the process ends. A connection whose
/// upstream cannot be reached is closed, and said on standard error.
pub async fn serve(listener: TcpListener, upstream: SocketAddr) -> std::io::Result<()> {
    loop {
        let (mut downstream, peer) = listener.accept().await?;
        tokio::spawn(async move {
            let mut up = match TcpStream::connect(upstream).await {
                Ok(up) => up,
                Err(e) => {
                    eprintln!("relay: {peer} → {upstream}: {e}");
                    return;
                }
            };
            // Small frames (gRPC acks, HTTP/2 control frames) go out at once, as the two ends send them.
            let _ = (downstream.set_nodelay(true), up.set_nodelay(true));
            // Ends when either side closes; a reset is the end of the connection, not an error to report.
            let _ = tokio::io::copy_bidirectional(&mut downstream, &mut up).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_go_through_both_ways_unchanged() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                let reply: Vec<u8> = buf[..n].iter().map(|b| b.wrapping_add(1)).collect();
                s.write_all(&reply).await.unwrap();
            }
        });
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = relay.local_addr().unwrap();
        tokio::spawn(serve(relay, echo_addr));
        let mut client = TcpStream::connect(relay_addr).await.unwrap();
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (mut read, mut write) = client.split();
        let expected: Vec<u8> = sent.iter().map(|b| b.wrapping_add(1)).collect();
        let (_, got) = tokio::join!(write.write_all(&sent), async {
            let mut got = vec![0u8; expected.len()];
            read.read_exact(&mut got).await.unwrap();
            got
        });
        assert_eq!(got, expected);
    }
}
