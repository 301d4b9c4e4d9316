#pragma once
// The HTTP side of `mixprec video serve` (cpp-httplib): the page, the MJPEG streams, the JSON
// figures, health and controls, with every resource bounded: viewers (503 beyond the limit),
// worker threads, connections waiting for one, request bodies and header counts. Bound to
// loopback, it answers only requests addressed to a loopback name (a web page elsewhere cannot
// reach it by DNS rebinding), and it refuses controls posted from another origin's page.
//
//   GET  /                 the page (embedded, self-contained)
//   GET  /stream/N         stream N as MJPEG (multipart/x-mixed-replace), N = 0 .. streams - 1
//   GET  /frame/N.jpg      the newest frame of stream N
//   GET  /api/figures      FPS, latency, counters, settings (JSON)
//   GET  /api/health       {"status": "ok"} or 503 with the generator's error
//   POST /api/control      form or query parameters: action=restart|pause|resume, start_video,
//                          seed, steps, precision, context_noise (validated; 400 says why)
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "live_video.h"
#include "mixprec/pipeline/frame_broadcast.h"

namespace httplib {
class Server;
}

namespace mixprec::app {

struct ServeLimits {
  int64_t max_viewers = 8;
  int64_t spare_workers = 8;  // threads for the page, figures and controls beside the viewers
  int64_t max_pending = 64;   // accepted connections waiting for a free thread
  int64_t max_body_bytes = 4096;
  int64_t max_headers = 64;
};

// 127.0.0.1, localhost or ::1.
bool is_loopback(const std::string& host);

// The page, one self-contained HTML document (styles and script inline, nothing fetched but
// this server's own endpoints).
std::string_view live_video_page();

class LiveVideoServer {
 public:
  LiveVideoServer(LiveVideo& live, ServeLimits limits);
  ~LiveVideoServer();
  LiveVideoServer(const LiveVideoServer&) = delete;
  LiveVideoServer& operator=(const LiveVideoServer&) = delete;

  // Binds host:port (port 0: a free one) and returns the port; throws Error when it cannot.
  int bind(const std::string& host, int port);
  void serve();  // answers requests until stop()
  void stop();   // safe from any thread

 private:
  void add_routes();

  LiveVideo& live_;
  ServeLimits limits_;
  bool loopback_ = true;  // bound to loopback: requests must name a loopback host
  pipeline::ViewerSeats seats_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace mixprec::app
