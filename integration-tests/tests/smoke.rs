use std::time::Duration;

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

#[tokio::test]
async fn smoke() {
    let server = RedisServer::start();
    let a = Client::connect(server.url()).await.unwrap();
    let b = Client::connect(server.url()).await.unwrap();
    let la = a.lock("x");
    let lb = b.lock("x");
    let g = la.lock().await.unwrap();
    assert!(lb.try_lock().await.unwrap().is_none());
    let t = tokio::spawn(async move {
        let start = std::time::Instant::now();
        let g = lb.lock().await.unwrap();
        (start.elapsed(), g.fencing_token())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = g.fencing_token();
    g.unlock().await.unwrap();
    let (waited, t1) = t.await.unwrap();
    println!(
        "waited {waited:?} tokens {t0} {t1} stats {:?} {:?}",
        a.stats(),
        b.stats()
    );
    assert!(t1 > t0);
}
