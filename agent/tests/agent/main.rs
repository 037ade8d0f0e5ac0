//! Integration tests: the real `lab-agent` binary on loopback, real HTTP,
//! real login shells, real files. One module per topic.

mod support;

mod adoption;
mod arm64;
mod auth;
mod cgroup_pool;
mod containment;
mod contract;
mod corpus;
mod errors;
mod exec;
mod faults;
mod floods;
mod hostile;
mod instance;
mod lifecycle;
mod listen;
mod logs;
mod privilege;
mod profiles;
mod ready;
mod setup;
mod statefiles;
mod stream;
mod strict;
mod timing;
mod unread;
