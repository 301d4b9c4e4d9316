#include "video_serve_http.h"

#include <httplib.h>

#include <charconv>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/io/json.h"

namespace mixprec::app {
namespace {

constexpr const char* kBoundary = "mixprecframe";
constexpr auto kViewerHeartbeat = std::chrono::seconds(1);

// Set while a connection is answered past the limits: every request on it gets a 503.
thread_local bool t_over_capacity = false;

// httplib's own pool queues accepted connections without a bound. This one keeps `max_pending`
// waiting; past that, the accepting thread answers the connection itself with a 503, which also
// stops it accepting meanwhile, so the rest wait in the kernel's listen backlog, not in memory.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(std::size_t workers, std::size_t max_pending) : max_pending_(max_pending) {
    for (std::size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
  }

  void enqueue(std::function<void()> job) override {
    {
      std::lock_guard lock(mutex_);
      if (jobs_.size() < max_pending_) {
        jobs_.push_back(std::move(job));
        ready_.notify_one();
        return;
      }
    }
    t_over_capacity = true;
    job();
    t_over_capacity = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and every accepted connection answered
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const std::size_t max_pending_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

void send_json(httplib::Response& res, int status, const std::string& json) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(json + "\n", "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, "{\"error\": " + io::json_quote(message) + "}");
}

// The stream number in a matched path, if it names one of `streams`.
std::optional<int64_t> stream_index(const httplib::Request& req, int64_t streams) {
  const std::string& text = req.matches[1].str();
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (ec != std::errc() || end != text.data() + text.size() || index >= streams) return {};
  return index;
}

// One viewer of one stream: what it sent last, and its seat (given back when the connection
// ends, whichever way).
struct Viewer {
  pipeline::ViewerSeats::Seat seat;
  int64_t stream;
  uint64_t sequence = 0;
  std::shared_ptr<const pipeline::EncodedFrames> last = nullptr;
};

// The host name of a Host header: "127.0.0.1:8080" -> "127.0.0.1", "[::1]:8080" -> "::1".
std::string host_name(const std::string& host_header) {
  if (host_header.starts_with('[')) return host_header.substr(1, host_header.find(']') - 1);
  return host_header.substr(0, host_header.find(':'));
}

}  // namespace

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

LiveVideoServer::LiveVideoServer(LiveVideo& live, ServeLimits limits)
    : live_(live),
      limits_(limits),
      seats_(limits.max_viewers),
      server_(std::make_unique<httplib::Server>()) {
  const auto workers = static_cast<std::size_t>(limits.max_viewers + limits.spare_workers);
  const auto pending = static_cast<std::size_t>(limits.max_pending);
  server_->new_task_queue = [workers, pending] { return new BoundedTaskQueue(workers, pending); };
  server_->set_payload_max_length(static_cast<std::size_t>(limits.max_body_bytes));
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);  // a viewer that stops reading is cut off after this
  server_->set_keep_alive_timeout(2);
  add_routes();
}

LiveVideoServer::~LiveVideoServer() = default;

int LiveVideoServer::bind(const std::string& host, int port) {
  const bool bound =
      port == 0 ? (port = server_->bind_to_any_port(host)) > 0 : server_->bind_to_port(host, port);
  MIXPREC_CHECK(bound, "[video serve] cannot listen on ", host, ":", port,
                " (address in use, or not an address of this machine?)");
  loopback_ = is_loopback(host);
  return port;
}

void LiveVideoServer::serve() { server_->listen_after_bind(); }

void LiveVideoServer::stop() { server_->stop(); }

void LiveVideoServer::add_routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_over_capacity) {
      res.set_header("Retry-After", "2");
      send_error(res, 503, "server busy: too many connections at once, try again shortly");
      return httplib::Server::HandlerResponse::Handled;
    }
    // httplib bounds each header line (8 KiB) but not their number.
    if (static_cast<int64_t>(req.headers.size()) > limits_.max_headers) {
      send_error(res, 431,
                 "too many request headers (at most " + std::to_string(limits_.max_headers) + ")");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (loopback_ && !is_loopback(host_name(req.get_header_value("Host")))) {
      send_error(res, 421, "this server answers requests for 127.0.0.1 or localhost only");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A page from elsewhere may post a form here; browsers name its origin, so refuse it.
    const std::string origin = req.get_header_value("Origin");
    if (req.method == "POST" && !origin.empty() &&
        origin != "http://" + req.get_header_value("Host")) {
      send_error(res, 403,
                 "controls from another site's page are refused (origin " +
                     io::json_quote_short(origin, 60) + ")");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Whatever httplib rejects on its own (a bad request line, oversized headers or body, no
  // such page) still gets a body that says what happened.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        switch (res.status) {
          case 404:
            send_error(res, 404,
                       "no such page (this server has /, /stream/N, /frame/N.jpg, /api/figures, "
                       "/api/health and POST /api/control)");
            break;
          case 413:
            send_error(res, 413, "request body too large");
            break;
          case 414:
            send_error(res, 414, "request line too long");
            break;
          default:
            send_error(res, res.status, "bad request");
            break;
        }
        return httplib::Server::HandlerResponse::Handled;
      }));

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::string(live_video_page()), "text/html; charset=utf-8");
  });

  s.Get(R"(/stream/(\d{1,9}))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::optional<int64_t> stream = stream_index(req, live_.streams());
    if (!stream)
      return send_error(res, 404,
                        "no such stream (this server has " + std::to_string(live_.streams()) +
                            ": /stream/0 ...)");
    std::optional<pipeline::ViewerSeats::Seat> seat = seats_.join();
    if (!seat) {
      res.set_header("Retry-After", "5");
      return send_error(res, 503,
                        "too many viewers: this server takes " + std::to_string(seats_.limit()) +
                            " at a time (--max-viewers)");
    }
    auto viewer = std::make_shared<Viewer>(Viewer{std::move(*seat), *stream, 0, nullptr});
    res.set_header("Cache-Control", "no-store");
    // Each part is followed at once by the next boundary: browsers show a part when they see
    // the boundary after it, so this way the newest frame is on screen, not the one before.
    res.set_content_provider(
        std::string("multipart/x-mixed-replace; boundary=") + kBoundary,
        [this, viewer](std::size_t, httplib::DataSink& sink) {
          pipeline::FrameBroadcast& broadcast = live_.broadcast();
          std::string part;
          if (viewer->sequence == 0 && !viewer->last) part = std::string("--") + kBoundary + "\r\n";
          const auto delivery = broadcast.wait_newer(viewer->sequence, kViewerHeartbeat);
          if (broadcast.closed()) return false;
          if (delivery.frames) {
            live_.add_dropped(delivery.skipped);
            viewer->sequence = delivery.sequence;
            viewer->last = delivery.frames;
          }
          // Nothing new (paused): the last frame again, which also finds viewers who left.
          if (!viewer->last) return part.empty() || sink.write(part.data(), part.size());
          const std::string& jpeg = viewer->last->jpeg[static_cast<std::size_t>(viewer->stream)];
          part += "Content-Type: image/jpeg\r\nContent-Length: " + std::to_string(jpeg.size()) +
                  "\r\n\r\n" + jpeg + "\r\n--" + kBoundary + "\r\n";
          return sink.write(part.data(), part.size());
        });
  });

  s.Get(R"(/frame/(\d{1,9})\.jpg)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::optional<int64_t> stream = stream_index(req, live_.streams());
    if (!stream) return send_error(res, 404, "no such stream");
    const auto newest = live_.broadcast().wait_newer(0, std::chrono::seconds(2));
    if (!newest.frames) return send_error(res, 503, "no frame yet");
    res.set_header("Cache-Control", "no-store");
    res.set_content(newest.frames->jpeg[static_cast<std::size_t>(*stream)], "image/jpeg");
  });

  s.Get("/api/figures", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, live_.figures_json(seats_.taken(), seats_.limit()));
  });

  s.Get("/api/health", [this](const httplib::Request&, httplib::Response& res) {
    const std::string failure = live_.failure();
    if (failure.empty())
      send_json(res, 200,
                "{\"status\": \"ok\", \"frames\": " + std::to_string(live_.frames()) + "}");
    else
      send_json(res, 503, "{\"status\": \"error\", \"error\": " + io::json_quote(failure) + "}");
  });

  s.Post("/api/control", [this](const httplib::Request& req, httplib::Response& res) {
    const ParsedControl parsed = parse_control(req.params);
    if (!parsed.change) return send_error(res, 400, parsed.error);
    live_.request(*parsed.change);
    send_json(res, 202, "{\"accepted\": true, \"applies\": \"at the next frame\"}");
  });
  s.Get("/api/control", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "POST");
    send_error(res, 405, "use POST for /api/control");
  });
}

}  // namespace mixprec::app
