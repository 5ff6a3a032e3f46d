//! One launcher's connection to etcd: a current-thread tokio runtime on a
//! thread of its own (the launcher stays synchronous), a lease kept alive
//! from there, and a watch that mirrors the job's keys into a [`View`] the
//! launcher reads. Every call from the launcher is bounded in time.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::pb::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, RangeRequest, WatchCreateRequest,
    WatchRequest, kv_client::KvClient, lease_client::LeaseClient, watch_client::WatchClient,
    watch_request::RequestUnion,
};
use crate::rdzv::EtcdTls;
use crate::{Error, Result};

/// Largest PEM file read for TLS: certificates chains and keys are a few
/// KiB.
const MAX_PEM: u64 = 1024 * 1024;

/// How long one request to etcd may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause before a stream is opened again after it broke.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// A key of the job as last seen.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) value: Vec<u8>,
    pub(crate) create_revision: i64,
    pub(crate) mod_revision: i64,
}

/// What the launcher knows of etcd.
#[derive(Debug)]
pub(crate) struct View {
    /// The job's keys (without the job's prefix) the filter kept.
    pub(crate) keys: BTreeMap<String, Entry>,
    /// The first full read has been made.
    pub(crate) synced: bool,
    /// The revision the mirror is at: the watch resumes from the next.
    pub(crate) revision: i64,
    /// When etcd last acknowledged a keepalive of our lease.
    pub(crate) last_ack: Instant,
    /// etcd said our lease is gone.
    pub(crate) lease_lost: bool,
    /// Leases kept alive (ours, then the job's).
    pub(crate) keep: Vec<i64>,
    /// Bumped on every change, for waiters.
    generation: u64,
}

struct Shared {
    view: Mutex<View>,
    changed: Condvar,
    requests: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, View> {
        // A panic elsewhere while holding the lock leaves the view as
        // consistent as any single update: keep going.
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut View)) {
        let mut view = self.lock();
        change(&mut view);
        view.generation = view.generation.wrapping_add(1);
        drop(view);
        self.changed.notify_all();
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// Which keys of the job to mirror.
pub(crate) type KeyFilter = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// A connected launcher.
pub(crate) struct Session {
    handle: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
    shutdown: Option<oneshot::Sender<()>>,
    shared: Arc<Shared>,
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    /// The endpoints, for messages.
    pub(crate) endpoints: String,
    /// Our lease.
    pub(crate) lease_id: i64,
    /// The job's key prefix.
    pub(crate) prefix: String,
}

impl Session {
    /// Connects, retrying until `timeout`; grants our lease (`ttl`) and
    /// starts keeping it alive and mirroring `prefix`. `None` when a stop
    /// signal came first.
    pub(crate) fn start(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        prefix: String,
        ttl: Duration,
        timeout: Duration,
        filter: KeyFilter,
    ) -> Result<Option<Session>> {
        let tls = tls.map(tls_config).transpose()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the etcd client's runtime", e))?;
        let handle = runtime.handle().clone();
        let (shutdown, stop) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("nodeipc-etcd".into())
            .spawn(move || {
                nodeipc_fdpass::StopSignals::block_in_this_thread();
                runtime.block_on(async {
                    let _ = stop.await;
                });
                // A name lookup stuck in the blocking pool must not hold
                // the launcher's exit.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(|e| Error::io("starting the etcd client's thread", e))?;
        let scheme = match tls {
            Some(_) => "https",
            None => "http",
        };
        let mut list = Vec::new();
        for e in endpoints {
            let endpoint = Endpoint::from_shared(format!("{scheme}://{e}"))
                .map_err(|err| backend_error(format!("--rdzv-endpoint {e:?}: {err}")))?
                .connect_timeout(Duration::from_secs(1))
                .http2_keep_alive_interval(Duration::from_secs(1))
                .keep_alive_timeout(Duration::from_secs(1))
                .keep_alive_while_idle(true);
            list.push(match &tls {
                Some(config) => endpoint
                    .tls_config(config.clone())
                    .map_err(|err| backend_error(format!("TLS to etcd at {e}: {err}")))?,
                None => endpoint,
            });
        }
        let channel = {
            let _entered = handle.enter();
            Channel::balance_list(list.into_iter())
        };
        let shared = Arc::new(Shared {
            view: Mutex::new(View {
                keys: BTreeMap::new(),
                synced: false,
                revision: 0,
                last_ack: Instant::now(),
                lease_lost: false,
                keep: Vec::new(),
                generation: 0,
            }),
            changed: Condvar::new(),
            requests: AtomicU64::new(0),
        });
        let mut session = Session {
            handle,
            thread: Some(thread),
            shutdown: Some(shutdown),
            shared,
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            endpoints: endpoints.join(","),
            lease_id: 0,
            prefix,
        };
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let granted = session.retry_until(timeout, "granting this launcher's lease", |s| {
            s.grant(ttl_secs)
        })?;
        let Some(lease_id) = granted else {
            return Ok(None);
        };
        session.lease_id = lease_id;
        session.shared.update(|v| {
            v.keep.push(session.lease_id);
            v.last_ack = Instant::now();
        });
        let own = session.lease_id;
        session.handle.spawn(keepalive(
            session.lease.clone(),
            Arc::clone(&session.shared),
            ttl,
            own,
        ));
        session.handle.spawn(mirror(
            session.kv.clone(),
            WatchClient::new(channel),
            Arc::clone(&session.shared),
            session.prefix.clone(),
            filter,
        ));
        Ok(Some(session))
    }

    /// Calls `op` until it succeeds or `timeout` has passed since the first
    /// call (then the last error, naming the endpoints and the wait);
    /// `None` when a stop signal is pending.
    pub(crate) fn retry_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut op: impl FnMut(&Self) -> Result<T>,
    ) -> Result<Option<T>> {
        let began = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            if nodeipc_fdpass::StopSignals::pending() {
                return Ok(None);
            }
            match op(self) {
                Ok(value) => return Ok(Some(value)),
                Err(error) if began.elapsed() >= timeout => {
                    return Err(Error::Backend {
                        reason: format!(
                            "{what}: no answer from etcd at {} within {} (--rdzv-timeout): {error}",
                            self.endpoints,
                            nodeipc_text::duration(timeout)
                        ),
                    });
                }
                Err(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One request, bounded by [`REQUEST_TIMEOUT`].
    pub(crate) fn call<T, F>(&self, what: &str, request: F) -> Result<T>
    where
        F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.shared.count();
        // The timer is made inside the runtime (block_on's future runs there).
        let bounded = async move { tokio::time::timeout(REQUEST_TIMEOUT, request).await };
        match self.handle.block_on(bounded) {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(Error::Backend {
                reason: format!(
                    "etcd at {}: {what}: {} ({:?})",
                    self.endpoints,
                    status.message(),
                    status.code()
                ),
            }),
            Err(_) => Err(Error::Backend {
                reason: format!(
                    "etcd at {}: {what}: no answer within {}",
                    self.endpoints,
                    nodeipc_text::duration(REQUEST_TIMEOUT)
                ),
            }),
        }
    }

    /// The KV client, for [`call`](Session::call).
    pub(crate) fn kv(&self) -> KvClient<Channel> {
        self.kv.clone()
    }

    /// A new lease of `ttl_secs`; its id.
    pub(crate) fn grant(&self, ttl_secs: i64) -> Result<i64> {
        let mut lease = self.lease.clone();
        let request = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        let granted = self.call(
            "LeaseGrant",
            async move { lease.lease_grant(request).await },
        )?;
        if !granted.error.is_empty() {
            return Err(Error::Backend {
                reason: format!("etcd at {}: LeaseGrant: {}", self.endpoints, granted.error),
            });
        }
        Ok(granted.id)
    }

    /// Revokes a lease (its keys go with it).
    pub(crate) fn revoke(&self, id: i64) -> Result<()> {
        let mut lease = self.lease.clone();
        let request = LeaseRevokeRequest { id };
        self.call(
            "LeaseRevoke",
            async move { lease.lease_revoke(request).await },
        )
        .map(drop)
    }

    /// Keeps `id` alive too (the job's lease).
    pub(crate) fn keep_alive(&self, id: i64) {
        self.shared.update(|v| {
            if !v.keep.contains(&id) {
                v.keep.push(id);
            }
        });
    }

    /// Stops keeping `id` alive.
    pub(crate) fn let_expire(&self, id: i64) {
        self.shared.update(|v| v.keep.retain(|&k| k != id));
    }

    /// The view, locked: read it and let go.
    pub(crate) fn view(&self) -> MutexGuard<'_, View> {
        self.shared.lock()
    }

    /// Waits up to `limit` for the view to change.
    pub(crate) fn wait_change(&self, limit: Duration) {
        let view = self.shared.lock();
        let seen = view.generation;
        let _ = self
            .shared
            .changed
            .wait_timeout_while(view, limit, |v| v.generation == seen);
    }

    /// Waits (at most a request's time) until the view has caught up with
    /// `revision`: what this launcher wrote is then in what it reads.
    pub(crate) fn catch_up(&self, revision: i64) {
        let view = self.shared.lock();
        let _ = self
            .shared
            .changed
            .wait_timeout_while(view, REQUEST_TIMEOUT, |v| v.revision < revision);
    }

    /// Requests made so far (calls, keepalives, watch creations).
    pub(crate) fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Our keys go at once rather than after the TTL; if etcd is out of
        // reach the lease expires on its own.
        if !self.view().lease_lost {
            let _ = self.revoke(self.lease_id);
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Keeps the view's leases alive, every third of the TTL, on one stream
/// opened again whenever it breaks. The stream requires a leader, so a
/// member cut off from its cluster does not acknowledge.
async fn keepalive(mut lease: LeaseClient<Channel>, shared: Arc<Shared>, ttl: Duration, own: i64) {
    let period = (ttl / 3).max(Duration::from_millis(300));
    loop {
        let (sender, receiver) = mpsc::channel::<LeaseKeepAliveRequest>(16);
        // etcd answers the call (its headers) with its first keepalive
        // answer: the first keepalives must be queued before the call.
        let ids = shared.lock().keep.clone();
        for id in ids {
            shared.count();
            let _ = sender.try_send(LeaseKeepAliveRequest { id });
        }
        let mut request = tonic::Request::new(ReceiverStream::new(receiver));
        request.metadata_mut().insert(
            "hasleader",
            tonic::metadata::MetadataValue::from_static("true"),
        );
        shared.count();
        let opened = tokio::time::timeout(REQUEST_TIMEOUT, lease.lease_keep_alive(request)).await;
        let Ok(Ok(response)) = opened else {
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        };
        let mut stream = response.into_inner();
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        'stream: loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let ids = shared.lock().keep.clone();
                    for id in ids {
                        shared.count();
                        if sender.send(LeaseKeepAliveRequest { id }).await.is_err() {
                            break 'stream;
                        }
                    }
                }
                message = stream.message() => match message {
                    Ok(Some(answer)) if answer.id == own => shared.update(|v| {
                        if answer.ttl <= 0 {
                            v.lease_lost = true;
                        } else {
                            v.last_ack = Instant::now();
                        }
                    }),
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break 'stream,
                },
            }
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

fn backend_error(reason: String) -> Error {
    Error::Backend { reason }
}

/// The client's TLS settings from the PEM files `tls` names.
fn tls_config(tls: &EtcdTls) -> Result<ClientTlsConfig> {
    let ca = read_pem(&tls.ca, "cacert")?;
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    if let Some((cert, key)) = &tls.identity {
        let identity = Identity::from_pem(read_pem(cert, "cert")?, read_pem(key, "key")?);
        config = config.identity(identity);
    }
    Ok(config)
}

/// A PEM file `--rdzv-conf KEY=` names, at most [`MAX_PEM`] bytes.
fn read_pem(path: &std::path::Path, key: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let what = format!("--rdzv-conf {key}={}", path.display());
    let failed = |e: std::io::Error| backend_error(format!("{what}: {e}"));
    let file = std::fs::File::open(path).map_err(failed)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    let pem = bytes.starts_with(b"-----BEGIN ") || bytes.windows(11).any(|w| w == b"-----BEGIN ");
    if bytes.len() as u64 > MAX_PEM || !pem {
        return Err(backend_error(format!(
            "{what}: not a PEM file of at most {MAX_PEM} bytes"
        )));
    }
    Ok(bytes)
}

/// The end of the range of keys that start with `prefix`.
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    // Our prefixes end in '/', never 0xff.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// Mirrors the keys under `prefix` that `filter` keeps: one read, then a
/// watch from the revision after it, resumed after a break from the last
/// revision seen + 1 (read again only when etcd has compacted past it).
async fn mirror(
    mut kv: KvClient<Channel>,
    mut watch: WatchClient<Channel>,
    shared: Arc<Shared>,
    prefix: String,
    filter: KeyFilter,
) {
    let mut need_read = true;
    loop {
        if need_read {
            let request = RangeRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: prefix_end(&prefix),
                ..RangeRequest::default()
            };
            shared.count();
            let read = tokio::time::timeout(REQUEST_TIMEOUT, kv.range(request)).await;
            let Ok(Ok(read)) = read else {
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            };
            let read = read.into_inner();
            let revision = read.header.map_or(0, |h| h.revision);
            shared.update(|v| {
                v.keys.clear();
                for kv in read.kvs {
                    insert(v, &prefix, &filter, kv);
                }
                v.revision = revision;
                v.synced = true;
            });
            need_read = false;
        }
        let start_revision = shared.lock().revision + 1;
        let (sender, receiver) = mpsc::channel::<WatchRequest>(1);
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: prefix_end(&prefix),
                start_revision,
                progress_notify: true,
                ..WatchCreateRequest::default()
            })),
        };
        if sender.send(create).await.is_err() {
            continue;
        }
        let mut request = tonic::Request::new(ReceiverStream::new(receiver));
        request.metadata_mut().insert(
            "hasleader",
            tonic::metadata::MetadataValue::from_static("true"),
        );
        shared.count();
        let opened = tokio::time::timeout(REQUEST_TIMEOUT, watch.watch(request)).await;
        let Ok(Ok(response)) = opened else {
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        };
        let mut stream = response.into_inner();
        // `sender` stays alive with the stream: dropping it would end the
        // request side and etcd would close the watch.
        while let Ok(Some(answer)) = stream.message().await {
            if answer.canceled {
                need_read = answer.compact_revision > 0;
                break;
            }
            if answer.created {
                // Its revision is the store's now, not what was sent: the
                // events from `start_revision` on come after it.
                continue;
            }
            let header_revision = answer.header.map_or(0, |h| h.revision);
            shared.update(|v| {
                let mut last = v.revision;
                for event in answer.events {
                    let Some(kv) = event.kv else { continue };
                    last = last.max(kv.mod_revision);
                    if event.r#type == 1 {
                        if let Some(key) = relative(&prefix, &kv.key) {
                            v.keys.remove(&key);
                        }
                    } else {
                        insert(v, &prefix, &filter, kv);
                    }
                }
                // A progress notice (no events): everything up to its
                // revision has been sent.
                v.revision = match last > v.revision {
                    true => last,
                    false => v.revision.max(header_revision),
                };
            });
        }
        drop(sender);
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

fn relative(prefix: &str, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    key.strip_prefix(prefix).map(str::to_owned)
}

fn insert(view: &mut View, prefix: &str, filter: &KeyFilter, kv: super::pb::mvccpb::KeyValue) {
    let Some(key) = relative(prefix, &kv.key) else {
        return;
    };
    if !filter(&key) {
        return;
    }
    view.keys.insert(
        key,
        Entry {
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        },
    );
}
