#pragma once
// A thin RAII layer over libzmq's C API, private to the pipeline layer: a context, a socket
// and a message that close themselves, and errors that name the call, the endpoint and
// zmq_strerror. Only what the frame sender and receiver use.
#include <zmq.h>

#include <cstddef>
#include <string>

namespace mixprec::pipeline::zmq {

// zmq's errno as "ZeroMQ: <reason>".
std::string last_error();

class Context {
 public:
  Context();
  ~Context();  // zmq_ctx_term: waits for sockets' linger, so sockets must close first
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void* get() const { return ctx_; }

 private:
  void* ctx_;
};

class Socket {
 public:
  Socket(Context& context, int type);
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void set(int option, int value);
  void bind(const std::string& endpoint);
  void connect(const std::string& endpoint);
  std::string last_endpoint() const;
  // Waits up to timeout_ms for `events` (ZMQ_POLLIN / ZMQ_POLLOUT); false on timeout or EINTR.
  bool wait(short events, long timeout_ms);
  void* get() const { return socket_; }

 private:
  void* socket_;
};

class Message {
 public:
  Message();
  ~Message();
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  // Receives the next part without waiting; false when none is there (EAGAIN).
  bool receive(Socket& socket);
  bool more() const;  // another part of the same message follows
  const std::byte* data() const;
  std::size_t size() const;

 private:
  zmq_msg_t msg_;
};

}  // namespace mixprec::pipeline::zmq
