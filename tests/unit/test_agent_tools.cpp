// ds4-agent's tools (src/agent/tools.h, workspace.h, shell_runner.h) on real
// files in a temporary working directory: what each tool does to the files
// is checked by reading them back; the workspace refuses every path that
// resolves outside (.., absolute, symlinks, dangling links) and accepts
// --allow-path folders; the shell's exit status, output cap, time limit,
// cancellation, confirmation and scrubbed environment.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/shell_runner.h"
#include "agent/tool_error.h"
#include "agent/tools.h"
#include "agent/workspace.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace ds4::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using test::TempDir;

struct Fixture {
  TempDir dir;
  fs::path root = dir.path() / "work";
  fs::path outside = dir.path() / "outside";
  Fixture() {
    fs::create_directories(root / "src");
    fs::create_directories(outside);
    test::write_text((root / "notes.txt").string(), "alpha\nbeta\ngamma\n");
    test::write_text((root / "src" / "main.c").string(), "int main() {\n  return 0;\n}\n");
    test::write_text((root / "src" / "util.h").string(), "#pragma once\nint twice(int);\n");
    test::write_text((outside / "secret.txt").string(), "do not read\n");
  }
  ToolBox tools(std::function<bool(const std::string&)> confirm = {}, ToolLimits limits = {}) {
    return ToolBox(Workspace(root), ShellOptions{}, std::move(confirm), limits);
  }
};

std::string ok(const ToolResult& r) {
  EXPECT_FALSE(r.is_error) << r.text;
  return r.text;
}
std::string err(const ToolResult& r) {
  EXPECT_TRUE(r.is_error) << r.text;
  return r.text;
}

TEST(AgentWorkspace, PathsResolvingOutsideAreRefusedWhateverTheRoute) {
  Fixture f;
  fs::create_directory_symlink(f.outside, f.root / "escape");
  fs::create_symlink(f.outside / "secret.txt", f.root / "secret-link");
  fs::create_symlink(f.outside / "new.txt", f.root / "dangling");
  const Workspace w(f.root);
  EXPECT_EQ(w.resolve("notes.txt"), fs::canonical(f.root / "notes.txt"));
  EXPECT_EQ(w.resolve("src/../notes.txt"), fs::canonical(f.root / "notes.txt"));
  EXPECT_EQ(w.resolve("src/new/file.txt"), fs::canonical(f.root) / "src/new/file.txt");
  for (const std::string& p : std::vector<std::string>{"../outside/secret.txt", "src/../../outside/secret.txt", "escape/secret.txt",
                              "secret-link", "dangling", "/etc/passwd", (f.outside / "x").string()}) {
    EXPECT_THROW(w.resolve(p), ToolError) << p;
  }
  EXPECT_EQ(w.display(w.resolve("src/main.c")), "src/main.c");
  EXPECT_EQ(w.display(w.resolve(".")), ".");

  const Workspace wider(f.root, {f.outside});
  EXPECT_EQ(wider.resolve("escape/secret.txt"), fs::canonical(f.outside / "secret.txt"));
  EXPECT_EQ(wider.resolve("../outside/secret.txt"), fs::canonical(f.outside / "secret.txt"));
}

TEST(AgentTools, ReadShowsNumberedRangesAndSaysWhereToContinue) {
  Fixture f;
  std::string many;
  for (int i = 1; i <= 30; ++i) many += "line " + std::to_string(i) + "\n";
  test::write_text((f.root / "many.txt").string(), many);
  ToolBox t = f.tools();
  EXPECT_EQ(ok(t.run("read", {{"path", "notes.txt"}})), "1\talpha\n2\tbeta\n3\tgamma\n(notes.txt: lines 1-3 of 3)");
  EXPECT_EQ(ok(t.run("read", {{"path", "many.txt"}, {"start_line", 10}, {"max_lines", "2"}})),
            "10\tline 10\n11\tline 11\n(many.txt: lines 10-11 of 30; continue with start_line=12)");
  EXPECT_NE(err(t.run("read", {{"path", "many.txt"}, {"start_line", 31}})).find("past its end"), std::string::npos);
  EXPECT_NE(err(t.run("read", {{"path", "../outside/secret.txt"}})).find("outside the working directory"),
            std::string::npos);
  EXPECT_NE(err(t.run("read", {{"path", "missing.txt"}})).find("missing.txt"), std::string::npos);
  EXPECT_NE(err(t.run("read", {{"path", "src"}})).find("is a folder"), std::string::npos);
  EXPECT_NE(err(t.run("read", Json::object())).find("missing argument 'path'"), std::string::npos);
  test::write_text((f.root / "bin.dat").string(), std::string("ab\0cd", 5));
  EXPECT_NE(err(t.run("read", {{"path", "bin.dat"}})).find("binary"), std::string::npos);
}

TEST(AgentTools, WriteCreatesAndReplacesInsideOnly) {
  Fixture f;
  ToolBox t = f.tools();
  EXPECT_EQ(ok(t.run("write", {{"path", "deep/new.txt"}, {"content", "x & y > z\n"}})), "created deep/new.txt (10 bytes)");
  EXPECT_EQ(test::read_text((f.root / "deep/new.txt").string()), "x & y > z\n");
  EXPECT_EQ(ok(t.run("write", {{"path", "notes.txt"}, {"content", ""}})), "replaced notes.txt (0 bytes)");
  EXPECT_EQ(test::read_text((f.root / "notes.txt").string()), "");
  fs::create_symlink(f.outside / "planted.txt", f.root / "dangling");
  err(t.run("write", {{"path", "dangling"}, {"content", "x"}}));
  err(t.run("write", {{"path", "../outside/planted.txt"}, {"content", "x"}}));
  EXPECT_FALSE(fs::exists(f.outside / "planted.txt"));
}

TEST(AgentTools, EditReplacesTheOneOccurrenceAndRefusesAbsentOrRepeatedText) {
  Fixture f;
  test::write_text((f.root / "code.py").string(), "x = 1\ny = 2\nx = 1\nprint(y)\n");
  ToolBox t = f.tools();
  EXPECT_EQ(ok(t.run("edit", {{"path", "code.py"}, {"old", "y = 2"}, {"new", "y = 3"}})), "edited code.py at line 2");
  EXPECT_EQ(test::read_text((f.root / "code.py").string()), "x = 1\ny = 3\nx = 1\nprint(y)\n");
  EXPECT_NE(err(t.run("edit", {{"path", "code.py"}, {"old", "x = 1"}, {"new", "x = 2"}})).find("occurs 2 times"),
            std::string::npos);
  EXPECT_NE(err(t.run("edit", {{"path", "code.py"}, {"old", "z = 9"}, {"new", "q"}})).find("does not occur"),
            std::string::npos);
  err(t.run("edit", {{"path", "code.py"}, {"old", ""}, {"new", "q"}}));
  EXPECT_EQ(test::read_text((f.root / "code.py").string()), "x = 1\ny = 3\nx = 1\nprint(y)\n");
  EXPECT_EQ(ok(t.run("edit", {{"path", "code.py"}, {"old", "x = 1\nprint"}, {"new", "print"}})),
            "edited code.py at line 3");
  EXPECT_EQ(test::read_text((f.root / "code.py").string()), "x = 1\ny = 3\nprint(y)\n");
}

TEST(AgentTools, ListGlobAndGrepSeeTheWorkspace) {
  Fixture f;
  fs::create_directories(f.root / ".git");
  test::write_text((f.root / ".git" / "HEAD").string(), "ref: main\n");
  ToolBox t = f.tools();
  EXPECT_EQ(ok(t.run("list", Json::object())), ".: 3 entries\n.git/\nnotes.txt  (17 bytes)\nsrc/\n");
  EXPECT_EQ(ok(t.run("glob", {{"pattern", "**/*.c"}})), "src/main.c\n");
  EXPECT_EQ(ok(t.run("glob", {{"pattern", "src/*"}})), "src/main.c\nsrc/util.h\n");
  EXPECT_EQ(ok(t.run("glob", {{"pattern", "*.txt"}})), "notes.txt\n");
  EXPECT_EQ(ok(t.run("glob", {{"pattern", "*.rs"}})), "no files match *.rs");
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "int \\w+\\("}})), "src/main.c:1:int main() {\nsrc/util.h:2:int twice(int);\n");
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "BETA"}, {"case_sensitive", false}})), "notes.txt:2:beta\n");
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "int"}, {"glob", "*.h"}, {"path", "src"}})),
            "src/util.h:2:int twice(int);\n");
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "main"}, {"max_results", 1}})).find("src/main.c:1:"), 0u);
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "ref"}})), "no matches for ref");  // .git is skipped
  // A link to a file outside is neither searched nor listed by glob.
  fs::create_symlink(f.outside / "secret.txt", f.root / "src" / "leak.txt");
  EXPECT_EQ(ok(t.run("grep", {{"pattern", "do not read"}})), "no matches for do not read");
  EXPECT_EQ(ok(t.run("glob", {{"pattern", "**/*.txt"}})), "notes.txt\n");
  EXPECT_NE(err(t.run("grep", {{"pattern", "("}})).find("bad pattern"), std::string::npos);
  EXPECT_NE(err(t.run("list", {{"path", ".."}})).find("outside"), std::string::npos);
  EXPECT_NE(err(t.run("frobnicate", Json::object())).find("no tool named 'frobnicate'"), std::string::npos);
}

TEST(AgentTools, GlobPatternsFollowFnmatchPerComponent) {
  EXPECT_TRUE(glob_matches("**/*.c", "a.c"));
  EXPECT_TRUE(glob_matches("**/*.c", "x/y/a.c"));
  EXPECT_FALSE(glob_matches("*.c", "x/a.c"));
  EXPECT_TRUE(glob_matches("x/**", "x/y/z"));
  EXPECT_TRUE(glob_matches("[ab]?.txt", "b1.txt"));
  EXPECT_FALSE(glob_matches("*.txt", ".hidden.txt"));
}

TEST(AgentShell, RunsInTheWorkspaceAndReportsStatusAndOutput) {
  Fixture f;
  ToolBox t = f.tools();
  EXPECT_EQ(ok(t.run("shell", {{"command", "pwd; echo err >&2"}})),
            "exit status 0\n" + fs::canonical(f.root).string() + "\nerr\n");
  EXPECT_EQ(err(t.run("shell", {{"command", "exit 3"}})), "exit status 3\n");
  EXPECT_NE(err(t.run("shell", {{"command", "true"}, {"timeout_sec", 0}})).find("timeout_sec"), std::string::npos);
}

TEST(AgentShell, TimeLimitAndCancelKillTheWholeGroup) {
  Fixture f;
  ShellOptions o;
  o.working_dir = f.root.string();
  const auto t0 = std::chrono::steady_clock::now();
  // The background child holds the pipe: killing the group must end it too.
  const ShellOutcome r = run_shell("sleep 30 & echo started; sleep 30", 1, o, {});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.output, "started\n");
  EXPECT_LT(secs, 10);

  int polls = 0;
  const ShellOutcome c = run_shell("sleep 30", 60, o, [&polls] { return ++polls > 3; });
  EXPECT_TRUE(c.cancelled);
  EXPECT_EQ(c.signal, 9);

  // A command that exits while its background child lives on returns at once.
  const auto t1 = std::chrono::steady_clock::now();
  const ShellOutcome b = run_shell("sleep 30 & echo done", 60, o, {});
  EXPECT_EQ(b.exit_status, 0);
  EXPECT_EQ(b.output, "done\n");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 10);
}

TEST(AgentShell, OutputIsCappedKeepingHeadAndTail) {
  Fixture f;
  ShellOptions o;
  o.working_dir = f.root.string();
  o.max_output_bytes = 100;
  const ShellOutcome r = run_shell("seq 1 100000", 60, o, {});
  EXPECT_EQ(r.output_bytes, 588895u);  // the bytes of `seq 1 100000`
  EXPECT_EQ(r.output.substr(0, 50), std::string("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n").substr(0, 50));
  EXPECT_NE(r.output.find("[... 588795 bytes cut ...]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.substr(r.output.size() - 13), "99999\n100000\n");
  EXPECT_EQ(cap_output("abcdef", 4), "ab\n[... 2 bytes cut ...]\nef");
  EXPECT_EQ(cap_output("abc", 4), "abc");
}

TEST(AgentShell, TheCommandSeesNoSecretsAndMayBeDeclined) {
  Fixture f;
  ::setenv("OPENAI_API_KEY", "sk-secret-value-7f3a", 1);
  ::setenv("MY_SERVICE_TOKEN", "token-secret-value-91c2", 1);
  ::setenv("DS4_AGENT_VISIBLE", "yes", 1);
  std::string asked;
  ToolBox t = f.tools([&asked](const std::string& c) {
    asked = c;
    return true;
  });
  const std::string out = ok(t.run("shell", {{"command", "env"}}));
  EXPECT_EQ(asked, "env");
  EXPECT_EQ(out.find("sk-secret-value-7f3a"), std::string::npos);
  EXPECT_EQ(out.find("token-secret-value-91c2"), std::string::npos);
  EXPECT_NE(out.find("DS4_AGENT_VISIBLE=yes"), std::string::npos);
  EXPECT_EQ(scrubbed_environment({"A=1", "GITHUB_TOKEN=x", "anthropic_base=y", "Db_Password=z", "PATH=/bin"}),
            (std::vector<std::string>{"A=1", "PATH=/bin"}));

  ToolBox declined = f.tools([](const std::string&) { return false; });
  EXPECT_EQ(err(declined.run("shell", {{"command", "touch made.txt"}})), "the user declined to run this command");
  EXPECT_FALSE(fs::exists(f.root / "made.txt"));
}

}  // namespace
}  // namespace ds4::agent
