// Small builders for the HTTP responses the server sends. Any thread.
#pragma once

#include <boost/beast/http.hpp>

#include <string>

#include "daemon/openai_request.h"

namespace voltad {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

HttpResponse make_response(unsigned status, std::string content_type, std::string body,
                           unsigned version, bool keep_alive);
HttpResponse json_response(unsigned status, std::string body, unsigned version, bool keep_alive);
// The OpenAI error object with its status; Retry-After when the error asks for it.
HttpResponse error_response(const ApiError& error, unsigned version, bool keep_alive);

ApiError not_found(std::string message, std::string code = "not_found");
ApiError unavailable(std::string message, int retry_after_seconds);
// 429 for a per-user limit, as OpenAI's: type "requests" (the limit's kind),
// code "rate_limit_exceeded", Retry-After 1.
ApiError rate_limited(std::string message);

}  // namespace voltad
