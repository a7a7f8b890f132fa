//! A small SMTP sink: speaks enough SMTP (EHLO, MAIL, RCPT, DATA, RSET, NOOP,
//! QUIT) for a real client, and keeps every message with its envelope.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Default)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
}

pub struct SmtpSink {
    pub url: String,
    mails: Arc<Mutex<Vec<Mail>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SmtpSink {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("smtp://{}", listener.local_addr()?);
        let mails: Arc<Mutex<Vec<Mail>>> = Arc::default();
        let sink = mails.clone();
        let server = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let sink = sink.clone();
                tokio::spawn(async move {
                    // A broken conversation only loses that message.
                    let _ = converse(socket, sink).await;
                });
            }
        });
        Ok(Self { url, mails, server })
    }

    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn converse(
    socket: tokio::net::TcpStream,
    sink: Arc<Mutex<Vec<Mail>>>,
) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 smtp-sink ESMTP\r\n").await?;
    let mut mail = Mail::default();
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            b"250 smtp-sink\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            mail = Mail {
                from: line[10..].trim().to_string(),
                ..Mail::default()
            };
            b"250 OK\r\n"
        } else if upper.starts_with("RCPT TO:") {
            mail.to
                .push(line[8..].trim().trim_matches(['<', '>']).to_string());
            b"250 OK\r\n"
        } else if upper == "DATA" {
            write
                .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = String::new();
            while let Some(l) = lines.next_line().await? {
                if l == "." {
                    break;
                }
                data.push_str(&l);
                data.push('\n');
            }
            mail.data = data;
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(std::mem::take(&mut mail));
            b"250 OK queued\r\n"
        } else if upper == "QUIT" {
            write.write_all(b"221 Bye\r\n").await?;
            return Ok(());
        } else {
            b"250 OK\r\n"
        };
        write.write_all(reply).await?;
    }
    Ok(())
}
