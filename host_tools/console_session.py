"""`snakemesh console`: an interactive session with a node's console.

On a terminal: a prompt with the node's short key, line editing and
history (readline; kept in ~/.snakemesh_history or $SNAKEMESH_HISTORY),
tab completion of commands and node names, replies printed as tables and
aligned `key  value` lists (host_tools/render.py), and whatever the node
sends on its own (log lines such as "peer up", telemetry and event
records) printed as it arrives, above the prompt. ping and trace take a
key prefix or a node name like the one-shot commands. `--json` prints the
node's replies and records as raw JSON lines instead.

From a pipe (not a terminal): no prompt; each line is sent and its reply
printed before the next line is read, so the output follows the input.

One reader thread owns the serial line: it matches replies to requests by
their id and hands everything else to the printer, so requests the
session makes itself (the key lookup of a prefix) never lose a line.
"""
import difflib
import json
import os
import sys
import threading
import time

from host_tools import names as names_mod
from host_tools import render
from host_tools.console_client import PREFIX, NodeError
from host_tools.errors import CliError, TimeoutError_

LOCAL_COMMANDS = ("quit", "exit")
HISTORY_ENV = "SNAKEMESH_HISTORY"
HISTORY_LEN = 1000
KEY_COMMANDS = ("ping", "trace", "send")
# What `help` shows for each command (firmware/snake/runtime/console.py answers
# `help` with the names only, to keep its text off the board's heap).
HELP = {
    "help": ("help [COMMAND]", "list the commands, or say how to use one"),
    "version": ("version", "firmware version, board, platform and crypto backend"),
    "status": ("status", "this node: key, root, parent, depth, peers, routes, uptime, free memory"),
    "peers": ("peers", "the links that are up: port, peer key, link type, the peer's root"),
    "tree": ("tree", "the spanning tree as this node sees it: root, parent, depth, ancestors"),
    "snake": ("snake", "the descending neighbour (the next lower key) and the number of routes"),
    "routes": ("routes", "the snake routes this node holds"),
    "stats": ("stats", "counters: frames, traffic, drops by reason, signature checks, links, tables, memory"),
    "mem": ("mem", "free heap now, and what each part of the firmware took at boot"),
    "ping": ("ping KEY [COUNT]", "send COUNT probes (default 3) to KEY and show the round trips; KEY is a "
                                 "full key, a prefix of 8+ hex digits or a --names name"),
    "trace": ("trace KEY", "the hops a probe takes to KEY, with their round-trip times"),
    "telemetry": ("telemetry SECONDS|off", "print the node's state, counters and peers every SECONDS "
                                           "(events as they happen); off stops it"),
    "send": ("send KEY SERVICE ACK [HEX|@]", "send a datagram of HEX bytes to KEY's SERVICE (0..65535); ACK 1 "
                                             "waits for the end-to-end ack (delivered or failed with a reason); "
                                             "@: the bytes staged by put"),
    "put": ("put TOTAL OFFSET HEX", "stage a datagram too long for one line, HEX at OFFSET of TOTAL bytes"),
    "recv": ("recv SERVICE|all|off", "show the datagrams arriving at this node for SERVICE (or all) as they come"),
    "quit": ("quit", "leave the console (also exit or Ctrl-D)"),
}


def _did_you_mean(word, commands):
    """The command `word` is most likely a typo of, or None: swapped letters
    first (stauts -> status), then the closest spelling."""
    close = difflib.get_close_matches(word, commands, n=3, cutoff=0.6)
    for c in close:
        if sorted(c) == sorted(word):
            return c
    return close[0] if close else None


class Session(object):
    """Requests by id over one ConsoleClient, with a reader thread."""

    def __init__(self, client, on_other):
        self.c = client
        self.on_other = on_other          # fn(kind, obj_or_text): "record", "reply", "line"
        self.lock = threading.Lock()
        self.waiting = {}                 # id -> [event, reply]
        self.stop = threading.Event()
        self.error = None
        self.n = 0
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def close(self):
        self.stop.set()
        self.thread.join(1.0)

    def _read(self):
        c = self.c
        try:
            while not self.stop.is_set():
                for line in c.raw_lines(time.monotonic() + 0.1):
                    self._line(line)
        except CliError as e:
            self.error = e
            with self.lock:
                for w in self.waiting.values():
                    w[0].set()
            self.on_other("error", e)

    def _line(self, line):
        c = self.c
        if not line.startswith(PREFIX):
            c.classify_line(line)        # raises for a REPL prompt; counts noise
            text = line.decode("utf-8", "replace").rstrip()
            if text.strip() and line.strip() not in c._sent:
                self.on_other("line", text)
            return
        obj = c.classify_line(line)
        if obj is None:
            self.on_other("line", line.decode("utf-8", "replace"))
            return
        rid = obj.get("id")
        if "re" in obj and rid is not None:
            with self.lock:
                w = self.waiting.get(str(rid))
            if w is not None:
                w[1] = obj
                w[0].set()
                return
        self.on_other("record" if ("v" in obj and "re" not in obj) else "reply", obj)

    def send(self, text, timeout):
        """Send one request line (without id) and wait for its reply."""
        with self.lock:
            self.n += 1
            rid = "c%d" % self.n
            ev = threading.Event()
            self.waiting[rid] = [ev, None]
        try:
            self.c.send_line("#%s %s" % (rid, text))
            end = time.monotonic() + timeout
            while not ev.wait(0.1):
                if time.monotonic() >= end:
                    # the client's own diagnosis: silence, garbage on the line, ...
                    raise self.c._timeout_error(text.split()[0], timeout)
            if self.error is not None:
                raise self.error
            return self.waiting[rid][1]
        finally:
            with self.lock:
                self.waiting.pop(rid, None)

    def request(self, command, timeout=5.0):
        """Like ConsoleClient.request: a reply dict, NodeError on ok:false."""
        r = self.send(command, timeout)
        if r.get("ok") is False:
            raise NodeError("%s: '%s' failed on the node: %s" % (self.c.port, command.split()[0],
                                                                  r.get("error") or "no reason given"))
        return r


class Console(object):
    def __init__(self, client, timeout=5.0, json_out=False, names=names_mod.EMPTY, wide=False,
                 stdin=None, stdout=None):
        self.client = client
        self.timeout = timeout
        self.json_out = json_out
        self.names = names
        self.wide = wide
        self.stdin = stdin or sys.stdin
        self.out = stdout or sys.stdout
        self.tty = self.stdin.isatty() and self.out.isatty()
        self.readline = None
        self.prompt = "snakemesh> "
        self.in_prompt = False        # the prompt is on the screen (input() waits for a line)
        self.prompting = False        # input() was called; the prompt may not be drawn yet
        self.redraw = False
        self.print_lock = threading.Lock()
        self.commands = list(render.RENDERERS)
        self.session = Session(client, self.on_other)
        self.completions = []
        self.failed = False       # an error reply or a bad argument (pipe: exit status 1)

    # -- output ----------------------------------------------------------------
    def emit(self, text):
        """Print `text` (lines); above the prompt while one is shown."""
        with self.print_lock:
            if self.in_prompt:
                # the prompt is on the screen: the text goes above it, then
                # the prompt and what was typed so far are drawn again
                buf = self.readline.get_line_buffer() if self.readline is not None else ""
                self.out.write("\r\x1b[K" + text + "\n" + self.prompt + buf)
            elif self.prompting:
                # input() is drawing the prompt right now: the text goes on
                # a clean line and the prompt is drawn again once it is up
                self.out.write("\r\x1b[K" + text + "\n")
                self.redraw = True
            else:
                self.out.write(text + "\n")
            self.out.flush()

    def _prompt_shown(self):
        """readline's pre-input hook: the prompt is on the screen now."""
        with self.print_lock:
            self.in_prompt = True
            if self.redraw:
                self.out.write("\r\x1b[K" + self.prompt + (self.readline.get_line_buffer() if self.readline else ""))
                self.out.flush()
            self.redraw = False

    def on_other(self, kind, obj):
        if kind == "error":
            if self.in_prompt:
                self.emit("snakemesh: %s (press Enter to leave)" % obj.message)
            return
        if self.json_out:
            if kind == "line":
                return            # raw JSON output: only the node's protocol lines
            self.emit(json.dumps(obj, sort_keys=True))
            return
        if kind == "line":
            self.emit(obj)
        elif kind == "record":
            self.emit(render.render_record(obj, self.names))
        else:
            # a reply nobody waits for: a late ping/trace, an id-less error
            self.emit(self.format_reply(obj))

    def format_reply(self, r, header=None):
        if self.json_out:
            return json.dumps(r, sort_keys=True)
        re = r.get("re") or ""
        d = render.strip_envelope(r)
        if r.get("ok") is False and not (re == "trace" and "hops" in r):
            return "error: %s%s" % ("%s: " % re if re else "", r.get("error") or "no reason given")
        fn = render.RENDERERS.get(re)
        if fn is None:
            return render.kv([(k, render.fmt(v)) for k, v in sorted(d.items())]) or "ok"
        if re in ("ping", "trace"):
            return fn(d, self.wide, self.names, header=header)
        return fn(d, self.wide, self.names)

    # -- input -----------------------------------------------------------------
    def setup_terminal(self):
        try:
            import readline
        except ImportError:
            return
        self.readline = readline
        self.history = os.environ.get(HISTORY_ENV) or os.path.join(os.path.expanduser("~"),
                                                                   ".snakemesh_history")
        try:
            readline.read_history_file(self.history)
        except (OSError, IOError):
            pass
        readline.set_history_length(HISTORY_LEN)
        readline.set_completer(self.complete)
        readline.set_completer_delims(" \t")
        readline.parse_and_bind("tab: complete")
        readline.set_pre_input_hook(self._prompt_shown)

    def save_history(self):
        if self.readline is not None:
            try:
                self.readline.write_history_file(self.history)
            except (OSError, IOError):
                pass

    def complete(self, text, state):
        if state == 0:
            line = self.readline.get_line_buffer()
            words = line[:self.readline.get_endidx()].split()
            first = not words or (len(words) == 1 and not line.endswith(" "))
            if first:
                pool = self.commands + list(LOCAL_COMMANDS)
            elif words[0] in KEY_COMMANDS:
                pool = sorted(self.names.by_name)
            else:
                pool = []
            self.completions = [w + " " for w in pool if w.startswith(text)]
        return self.completions[state] if state < len(self.completions) else None

    def read_line(self):
        """The next input line, or None at end of input."""
        if not self.tty:
            line = self.stdin.readline()
            return None if not line else line.rstrip("\r\n")
        with self.print_lock:
            self.redraw = False
            if self.readline is None:
                self.in_prompt = True      # no hook to tell: input() draws it at once
            else:
                self.prompting = True      # until readline's pre-input hook says it is drawn
        try:
            return input(self.prompt)
        except EOFError:
            self.out.write("\n")
            return None
        finally:
            with self.print_lock:
                self.in_prompt = self.prompting = False

    # -- the session -------------------------------------------------------------
    def greet(self):
        try:
            st = self.session.request("status", self.timeout)
        except NodeError as e:
            self.emit("connected to %s (%s)" % (self.client.port, e.message))
            return
        key = st.get("key") or ""
        name = self.names.name(key)
        self.prompt = "%s> " % (name or key[:8] or "snakemesh")
        try:
            h = self.session.request("help", self.timeout)
            self.commands = list(h.get("commands") or self.commands)
        except NodeError:
            pass
        if self.tty:
            self.emit("connected to %s: node %s%s, root %s, %s peers; help lists commands, "
                      "Ctrl-D or quit leaves" % (self.client.port, key[:16], " (%s)" % name if name else "",
                                                  render.short(st.get("root"), False, self.names),
                                                  render.num(st.get("peers", 0))))

    def help_text(self, args):
        """`help`: every command with one line; `help CMD`: its usage."""
        cmds = [c for c in self.commands if c != "help"] + ["help", "quit"]
        if args:
            cmd = args[0]
            if cmd == "exit":
                cmd = "quit"
            if cmd in HELP and (cmd in self.commands or cmd in ("help", "quit")):
                usage, what = HELP[cmd]
                return "%s\n  %s" % (usage, what)
            close = _did_you_mean(cmd, cmds)
            self.failed = True
            return "error: help: no command %s%s (help lists commands)" % (
                cmd, "; did you mean %s?" % close if close else "")
        width = max(len(HELP.get(c, (c, ""))[0]) for c in cmds)
        lines = ["commands (help COMMAND for one):"]
        for c in cmds:
            usage, what = HELP.get(c, (c, "(no description: a command of a newer firmware)"))
            lines.append("  %-*s  %s" % (width, usage, what))
        return "\n".join(lines)

    def handle(self, line):
        words = line.split()
        if not words:
            return True
        if words[0] in LOCAL_COMMANDS and len(words) == 1:
            return False
        if words[0].startswith("#"):      # the console protocol itself: sent as typed
            self.session.c.send_line(line)
            return True
        cmd = words[0]
        if cmd == "help" and self.tty and not self.json_out:
            # at a terminal; a pipe keeps the node's own one-line list
            self.emit(self.help_text(words[1:]))
            return True
        known = list(self.commands) + list(LOCAL_COMMANDS)
        if cmd not in known:
            close = _did_you_mean(cmd, known)
            if close:      # a typo: say what was meant (anything else is the node's to answer)
                self.failed = True
                self.emit("error: %s: unknown command; did you mean %s? (help lists commands)" % (cmd, close))
                return True
        header = None
        timeout = self.timeout
        if cmd in KEY_COMMANDS and len(words) >= 2:
            try:
                key = names_mod.resolve(words[1], self.names,
                                        known=lambda: names_mod.node_keys(self.session))
            except CliError as e:
                self.failed = True
                self.emit("error: " + e.message)
                return True
            words[1] = key
            n = self.names.name(key)
            header = "%s %s%s" % (cmd, key, " (%s)" % n if n else "")
            if cmd == "ping":
                try:
                    count = int(words[2]) if len(words) > 2 else 3
                except ValueError:
                    count = 3
                timeout = self.timeout + max(1, min(count, 100))
            elif cmd == "send":
                timeout = max(self.timeout, 30)     # an acked datagram ends within ~22 s
            else:
                timeout = self.timeout * 2 + 10
        try:
            reply = self.session.send(" ".join(words), timeout)
        except TimeoutError_ as e:
            if not self.tty:
                raise                 # a script learns it from the exit status (4)
            self.emit("error: " + e.message)
            return True
        except KeyboardInterrupt:
            self.emit("(stopped waiting; a late reply is printed when it comes)")
            return True
        if reply.get("ok") is False and not (cmd == "trace" and "hops" in reply):
            self.failed = True
        self.emit(self.format_reply(reply, header))
        if cmd == "ping" and reply.get("ok") is not False and not self.json_out \
                and not render.ping_summary(render.strip_envelope(reply))[1]:
            try:
                self.emit(names_mod.no_answer(words[1], names_mod.node_keys(self.session)))
            except CliError:
                pass
        return True

    def run(self):
        self.session.start()
        if self.tty:
            self.setup_terminal()
        try:
            if self.tty:
                self.greet()
            while self.session.error is None:
                try:
                    line = self.read_line()
                    if line is None:
                        break
                    if not self.handle(line.strip()):
                        break
                except KeyboardInterrupt:
                    if not self.tty:
                        break
                    self.out.write("^C (Ctrl-D or quit leaves)\n")
        finally:
            self.save_history()
            self.session.close()
        if self.session.error is not None:
            raise self.session.error
        return 1 if (self.failed and not self.tty) else 0
