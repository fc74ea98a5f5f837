// A query client's view of a SessionServer (what `fragscope top` reads): one JSON document that
// parses whatever bytes the traced programs sent as their names.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fragscope/server/session_server.h"
#include "fragscope/trace/frame_writer.h"

namespace fragscope {
namespace {

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  return fd;
}

std::string Query(const std::string& path) {
  int fd = Connect(path);
  char header[kQueryHeaderBytes] = {};
  std::memcpy(header, kQueryMagic, sizeof(kQueryMagic));
  header[8] = 1;
  EXPECT_EQ(send(fd, header, sizeof(header), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(header)));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

// The bytes of a stream holding one Hello, as an agent would send them.
std::string HelloStream(const std::string& dir, const std::string& exe, const std::string& host) {
  const std::string path = dir + "/hello.fst";
  {
    auto writer = FrameWriter::CreateFile(path);
    EXPECT_TRUE(writer.ok()) << writer.status();
    v1::Frame hello;
    hello.mutable_hello()->set_pid(4242);
    hello.mutable_hello()->set_exe(exe);
    hello.mutable_hello()->set_host(host);
    EXPECT_TRUE(writer->Write(hello).ok());
    EXPECT_TRUE(writer->Close().ok());
  }
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SessionServerQuery, NamesWithAnyBytesStayValidJson) {
  char dir_template[] = "/tmp/fragscope-query-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  auto server = SessionServer::Start(dir + "/collector.sock", SessionServerOptions{});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string exe = "/opt/\"train\"\n\x01\xFF.py";
  const std::string bytes = HelloStream(dir, exe, "h\xC3");
  int agent = Connect((*server)->socket_path());
  ASSERT_EQ(send(agent, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  // The stream is applied on the server's thread: ask until it is listed.
  nlohmann::json doc;
  for (int i = 0; i < 500; ++i) {
    doc = nlohmann::json::parse(Query((*server)->socket_path()), nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << "the answer is not JSON";
    if (!doc["streams"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(doc["streams"].size(), 1u) << doc.dump();
  const nlohmann::json& s = doc["streams"][0];
  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(s["pid"], 4242);
  EXPECT_EQ(s["exe"], "/opt/\"train\"\n\x01\xEF\xBF\xBD.py");  // invalid byte: U+FFFD
  EXPECT_EQ(s["host"], "h\xEF\xBF\xBD");
  EXPECT_EQ(s["connected"], true);
  EXPECT_TRUE(s["report"].is_object());
  EXPECT_EQ(s["report"]["process"]["pid"], 4242);
  close(agent);
  (*server)->Finish(2000);
  std::remove((dir + "/hello.fst").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace fragscope
