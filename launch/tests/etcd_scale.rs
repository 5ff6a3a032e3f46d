//! Lost launchers and partitions, through a real etcd on loopback.

mod etcd_kit;

fn main() {
    etcd_kit::main(&[]);
}
