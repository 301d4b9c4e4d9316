#include "zmq_socket.h"

#include <cerrno>

#include "mixprec/core/error.h"

namespace mixprec::pipeline::zmq {

std::string last_error() { return std::string("ZeroMQ: ") + zmq_strerror(zmq_errno()); }

Context::Context() : ctx_(zmq_ctx_new()) {
  MIXPREC_CHECK(ctx_ != nullptr, "[zmq] cannot create a context: ", last_error());
}

Context::~Context() {
  // EINTR: a signal arrived while lingering; term must be retried or the context leaks.
  while (zmq_ctx_term(ctx_) == -1 && zmq_errno() == EINTR) {
  }
}

Socket::Socket(Context& context, int type) : socket_(zmq_socket(context.get(), type)) {
  MIXPREC_CHECK(socket_ != nullptr, "[zmq] cannot create a socket: ", last_error());
}

Socket::~Socket() { zmq_close(socket_); }

void Socket::set(int option, int value) {
  MIXPREC_CHECK(zmq_setsockopt(socket_, option, &value, sizeof value) == 0,
                "[zmq] cannot set socket option ", option, " to ", value, ": ", last_error());
}

void Socket::bind(const std::string& endpoint) {
  MIXPREC_CHECK(zmq_bind(socket_, endpoint.c_str()) == 0, "[zmq] cannot bind '", endpoint,
                "': ", last_error());
}

void Socket::connect(const std::string& endpoint) {
  MIXPREC_CHECK(zmq_connect(socket_, endpoint.c_str()) == 0, "[zmq] cannot connect to '", endpoint,
                "': ", last_error());
}

std::string Socket::last_endpoint() const {
  char buffer[512];
  std::size_t size = sizeof buffer;
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buffer, &size) != 0 || size == 0) return {};
  return std::string(buffer, size - 1);  // size counts the terminating NUL
}

bool Socket::wait(short events, long timeout_ms) {
  zmq_pollitem_t item{socket_, 0, events, 0};
  const int n = zmq_poll(&item, 1, timeout_ms);
  if (n == -1) {
    MIXPREC_CHECK(zmq_errno() == EINTR, "[zmq] poll failed: ", last_error());
    return false;
  }
  return n > 0 && (item.revents & events) != 0;
}

Message::Message() { zmq_msg_init(&msg_); }
Message::~Message() { zmq_msg_close(&msg_); }

bool Message::receive(Socket& socket) {
  while (true) {
    if (zmq_msg_recv(&msg_, socket.get(), ZMQ_DONTWAIT) >= 0) return true;
    if (zmq_errno() == EAGAIN) return false;
    MIXPREC_CHECK(zmq_errno() == EINTR, "[zmq] receive failed: ", last_error());
  }
}

bool Message::more() const { return zmq_msg_more(const_cast<zmq_msg_t*>(&msg_)) != 0; }
const std::byte* Message::data() const {
  return static_cast<const std::byte*>(zmq_msg_data(const_cast<zmq_msg_t*>(&msg_)));
}
std::size_t Message::size() const { return zmq_msg_size(const_cast<zmq_msg_t*>(&msg_)); }

}  // namespace mixprec::pipeline::zmq
