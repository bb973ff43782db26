//! A delay line in front of a local service, for the benchmarks: the emulators answer in about a
//! millisecond over loopback, an AWS service in several. Every byte the client sends reaches the
//! service `delay` later (a one-way delay on the request path; bytes keep their order and their
//! spacing), so a request costs at least `delay` more, however many pieces it is written in.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Listen on a loopback port and forward every connection to `upstream` with `delay` added to
/// what the client sends. Returns the address to connect to instead of `upstream`.
pub async fn delay_line(upstream: SocketAddr, delay: Duration) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    forward(client, server, delay).await;
                }
            });
        }
    });
    Ok(addr)
}

async fn forward(client: TcpStream, server: TcpStream, delay: Duration) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let (chunks, mut due) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    // What the client sends, stamped on arrival...
    let read = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = client_rx.read(&mut buf).await {
            if n == 0 || chunks.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    // ... reaches the service when its time comes, in order.
    let write = tokio::spawn(async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if server_tx.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    });
    // The answers come back at once.
    let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
    read.abort();
    write.abort();
}

/// A switch in front of a local service, for the storm benchmark: while it is off, every
/// connection through it is closed (those open at once, new ones as they come), as a service that
/// went down; switched on, connections pass again untouched.
#[derive(Clone, Debug)]
pub struct Outage(tokio::sync::watch::Sender<bool>);

impl Outage {
    /// Take the service down (`true`) or bring it back.
    pub fn set(&self, down: bool) {
        self.0.send_replace(down);
    }

    pub fn is_down(&self) -> bool {
        *self.0.borrow()
    }
}

/// Listen on a loopback port and forward every connection to `upstream`, unless `Outage` says the
/// service is down. Returns the address to connect to instead of `upstream`, and the switch.
pub async fn outage_line(upstream: SocketAddr) -> std::io::Result<(SocketAddr, Outage)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (switch, state) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut down = state.clone();
            if *down.borrow() {
                drop(client);
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    _ = down.wait_for(|d| *d) => {}
                }
            });
        }
    });
    Ok((addr, Outage(switch)))
}
