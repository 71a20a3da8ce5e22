mod common;
use common::*;
use tonic::transport::{Endpoint, Server};
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing() {
    let sys = System::start().await;
    let mut leaf = sys.leaf_client().await;
    let plain = Endpoint::from_shared(format!("http://{}", sys.leaf)).unwrap().connect().await.unwrap();
    let mut plain_leaf = pb::leaf_client::LeafClient::new(plain);
    // plain server
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(Server::builder().add_service(pb::middle_server::MiddleServer::new(Echo)).serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    let ch = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut plain_plain = pb::middle_client::MiddleClient::new(ch);
    for _ in 0..2 {
        let t = std::time::Instant::now();
        for _ in 0..20 { leaf.get(msg("k")).await.unwrap(); }
        eprintln!("TIMING dei->dei 20 gets {:?}", t.elapsed());
        let t = std::time::Instant::now();
        for _ in 0..20 { plain_leaf.get(msg("k")).await.unwrap(); }
        eprintln!("TIMING plain->dei 20 gets {:?}", t.elapsed());
        let t = std::time::Instant::now();
        for _ in 0..20 { plain_plain.work(msg("k")).await.unwrap(); }
        eprintln!("TIMING plain->plain 20 {:?}", t.elapsed());
    }
}
struct Echo;
#[tonic::async_trait]
impl pb::middle_server::Middle for Echo {
    async fn work(&self, r: tonic::Request<pb::Msg>) -> Result<tonic::Response<pb::Msg>, tonic::Status> { Ok(tonic::Response::new(r.into_inner())) }
}
