// Hostile files (hostile_test.cc says what every case must end in): external data stays beneath the model's
// directory; no FIFO, device or directory as data or as the model; a flags file's contents never echoed.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/cpu/tensor_util.h"
#include "runtime/session.h"
#include "tests/hostile_util.h"
#include "tests/model_builder.h"

namespace cjit::hostile {
namespace {

using testing::ModelBuilder;

// ---- files: external data stays beneath the model's directory; no FIFO, device or directory as data ----

class ExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (std::filesystem::temp_directory_path() / ("cjit-extdata-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/model/sub");
    std::filesystem::create_directories(root_ + "/outside");
    std::ofstream(root_ + "/outside/secret.bin", std::ios::binary).write("\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    std::ofstream(root_ + "/model/w.bin", std::ios::binary).write("\0\0\x80\x3f\0\0\0\x40", 8);  // 1.0f, 2.0f
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // A model y = x + w with w: f32[2] in external data `location`; loaded from root_/model/m.onnx.
  absl::StatusOr<std::unique_ptr<Session>> Load(const std::string& location) {
    ModelBuilder b;
    b.Input("x", kF, {2}).Output("y");
    auto* w = b.Init("w", kF, {2});
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = w->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    b.Node("Add", {"x", "w"}, {"y"});
    std::string path = root_ + "/model/m.onnx";
    std::ofstream(path, std::ios::binary) << b.Bytes();
    return Session::Load(path, Opts());
  }
  std::string root_;
};

TEST_F(ExternalDataTest, InsideTheModelDirectoryLoads) {
  auto s = Load("w.bin");
  ASSERT_TRUE(s.ok()) << s.status();
  auto r = (*s)->Run({{"x", F32({2}, {10, 20})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.ToDoubleVector(), (std::vector<double>{11, 22}));
  // A symlink that stays inside the directory is fine.
  std::filesystem::create_symlink("../w.bin", root_ + "/model/sub/link.bin");
  EXPECT_TRUE(Load("sub/link.bin").ok());
}

TEST_F(ExternalDataTest, EscapesAreRefused) {
  std::filesystem::create_symlink(root_ + "/outside/secret.bin", root_ + "/model/file_link.bin");
  std::filesystem::create_symlink(root_ + "/outside", root_ + "/model/dir_link");
  std::filesystem::create_symlink("../outside/secret.bin", root_ + "/model/dotdot_link.bin");
  for (const char* loc : {"file_link.bin", "dir_link/secret.bin", "dotdot_link.bin", "../outside/secret.bin",
                          "sub/../../outside/secret.bin"}) {
    EXPECT_TRUE(ErrorWith(Load(loc).status(), {"'w'", "outside"})) << loc;
  }
  EXPECT_TRUE(ErrorWith(Load((root_ + "/outside/secret.bin").c_str()).status(), {"relative"}));
  EXPECT_TRUE(ErrorWith(Load("/proc/self/environ").status(), {"relative"}));
}

TEST_F(ExternalDataTest, FifosDevicesAndShortFilesAreRefused) {
  ASSERT_EQ(::mkfifo((root_ + "/model/fifo.bin").c_str(), 0644), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ErrorWith(Load("fifo.bin").status(), {"FIFO"}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  std::filesystem::create_symlink("/dev/zero", root_ + "/model/zero.bin");
  EXPECT_FALSE(Load("zero.bin").ok());
  std::ofstream(root_ + "/model/short.bin", std::ios::binary).write("\0\0", 2);
  EXPECT_TRUE(ErrorWith(Load("short.bin").status(), {"'w'", "short.bin"}));
}

TEST(HostileFileTest, ModelPathThatIsNotARegularFile) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("cjit-modelfifo-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(ErrorWith(Session::Load(dir, Opts()).status(), {"directory"}));
  ASSERT_EQ(::mkfifo((dir + "/m.onnx").c_str(), 0644), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ErrorWith(Session::Load(dir + "/m.onnx", Opts()).status(), {"FIFO"}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_TRUE(ErrorWith(Session::Load("/dev/zero", Opts()).status(), {"device"}));
  std::filesystem::remove_all(dir);
}

// A model or flags file over its bound (2 GiB, the protobuf limit; 1 MiB) is refused from its size, before a
// byte is read (sparse files: no disk used).
TEST(HostileFileTest, OversizedFilesAreRefusedBeforeReading) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("cjit-oversized-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto sparse = [&](const std::string& name, int64_t bytes) {
    std::string path = dir + "/" + name;
    std::ofstream(path).close();
    std::filesystem::resize_file(path, static_cast<uintmax_t>(bytes));
    return path;
  };
  EXPECT_TRUE(ErrorWith(Session::Load(sparse("m.onnx", (int64_t{2} << 30) + 1), Opts()).status(),
                        {"model file", "2147483649 bytes", "more than the 2147483648 allowed"}));
  EXPECT_TRUE(ErrorWith(ParseFlags(sparse("flags", (int64_t{1} << 20) + 1)).status(),
                        {"flags file", "1048577 bytes", "more than"}));
  std::filesystem::remove_all(dir);
}

// A flags file that is not one never has its contents echoed (it might be /etc/shadow).
TEST(HostileFileTest, FlagsFileContentsAreNeverEchoed) {
  std::string path =
      (std::filesystem::temp_directory_path() / ("cjit-flagsfile-" + std::to_string(::getpid()))).string();
  std::ofstream(path) << "root:$6$SECRETHASH:19000:0:99999:7:::\n--no_such_flag=SECRET2\n";
  auto f = ParseFlags(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(std::string(f.status().message()).find("SECRET"), std::string::npos) << f.status();
  std::ofstream(path) << "--intra_op_threads=SECRET3\n";
  f = ParseFlags(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(std::string(f.status().message()).find("SECRET"), std::string::npos) << f.status();
  EXPECT_NE(std::string(f.status().message()).find("intra_op_threads"), std::string::npos) << f.status();
  auto zero = ParseFlags("/dev/zero");
  EXPECT_TRUE(ErrorWith(zero.status(), {"device"}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cjit::hostile
