#include "daemon/http_response.h"

#include "daemon/openai_response.h"

namespace voltad {

namespace http = boost::beast::http;

HttpResponse make_response(unsigned status, std::string content_type, std::string body,
                           unsigned version, bool keep_alive) {
  HttpResponse res{static_cast<http::status>(status), version};
  res.set(http::field::server, "voltad/" VOLTAD_VERSION);
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

HttpResponse json_response(unsigned status, std::string body, unsigned version, bool keep_alive) {
  return make_response(status, "application/json", std::move(body), version, keep_alive);
}

HttpResponse error_response(const ApiError& error, unsigned version, bool keep_alive) {
  HttpResponse res = json_response(unsigned(error.status), error_body(error), version, keep_alive);
  if (error.retry_after_seconds > 0)
    res.set(http::field::retry_after, std::to_string(error.retry_after_seconds));
  return res;
}

ApiError not_found(std::string message, std::string code) {
  ApiError e;
  e.status = 404;
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError unavailable(std::string message, int retry_after_seconds) {
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.message = std::move(message);
  e.code = "unavailable";
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

ApiError rate_limited(std::string message) {
  ApiError e;
  e.status = 429;
  e.type = "requests";
  e.code = "rate_limit_exceeded";
  e.message = std::move(message);
  e.retry_after_seconds = 1;
  return e;
}

}  // namespace voltad
