# mtad - non-recursive GNU make.  Objects go to build/ (or build-asan/).
# Targets: all (the default: mtad, mtactl, mtad-sendmail, the bench tools),
#          deps, run, test, unit, integration, layering, size, asan, bench,
#          fuzz, install, deb, clean.
# Only `make deps` installs packages (packaging/deps.sh holds the list);
# `make run` and `make test` call it first, a compile never does.
.DEFAULT_GOAL := all

# Every core builds, unless the command line says -jN (which wins); a
# sub-make (make test, make run, make asan) shares its parent's jobs.
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

PKGS     := openssl lmdb yaml-0.1 libcares libseccomp libxcrypt libcurl zlib hiredis
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
CC       ?= cc
OPT      ?= -O2 -g
SAN      ?=
CFLAGS_W := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CPPFLAGS += -I. -D_GNU_SOURCE -MMD -MP
# The one version (VERSION): --version, mtactl status, the .deb.
MTAD_VERSION := $(shell cat VERSION 2>/dev/null || echo 0)
CPPFLAGS += -DMTAD_VERSION='"$(MTAD_VERSION)"'
VERSION_USERS = master/main master/control master/status_json master/metrics obj-mtactl/mtactl obj-sendmail/main
CFLAGS   += -std=c11 $(OPT) $(SAN) $(CFLAGS_W) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LDFLAGS  += $(SAN)
CRIT_LIBS = $(shell pkg-config --libs criterion 2>/dev/null)

# One static library per module; the graph (MODS, deps_<m>, pub_<m>) is
# mk/modules.mk, which tests/layering.sh (`make layering`) checks the tree
# against.
include mk/modules.mk
# libs MODULES: the libraries for MODULES and what they use, in link order.
libs = $(patsubst %,$(BUILD)/lib/lib%.a,$(filter $(sort $(1) \
       $(foreach m,$(1),$(deps_$(m)))),$(MODS)))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
# master/main.c holds main(); mtactl is a program, not a library.
SRC_master := $(filter-out master/main.c,$(wildcard master/*.c))
$(foreach m,$(filter-out master,$(MODS)),$(eval SRC_$(m) := $(wildcard $(m)/*.c)))
$(foreach m,$(MODS),$(eval $(BUILD)/lib/lib$(m).a: $(call obj,$(SRC_$(m)))))
MTACTL_SRC := $(wildcard mtactl/*.c)

UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
# What each unit test links: only the module it tests (and what that uses),
# so a test that needs more than its module does not link.
umod_test_buf := common
umod_test_ctl := common
umod_test_ev := common
umod_test_chan := common
umod_test_log := common
umod_test_status := common
umod_test_util := common
umod_test_logfmt := common
umod_test_safefs := common
umod_test_tlskey := common
umod_test_smtp_data := smtp
umod_test_smtp_hops := smtp
umod_test_dkim := dkim
umod_test_bclass := bclass
umod_test_smtp_parse := smtp
umod_test_smtp_reply := smtp
umod_test_spool := spool
umod_test_spool_wire := spool
umod_test_requiretls := spool
umod_test_spool_sync := spool
umod_test_spool_reap := spool
umod_test_sandbox_threads := common
umod_test_router := router
umod_test_config := config
umod_test_dns := dns
umod_test_dns_rbl := dns
umod_test_grey := grey
umod_test_sts := sts
umod_test_proxy := proxy
umod_test_sasl := sasl
umod_test_config_listen := config
umod_test_deliver := delivery
umod_test_deliver_queue := delivery
umod_test_dsn := delivery
umod_test_mta := delivery
umod_test_egress := delivery
umod_test_resolve := delivery
umod_test_mta_sts := delivery
umod_test_reqtls := tlspol
umod_test_tls_policy := tlspol
umod_test_tls_cache := tlspol
umod_test_tlsrpt := tlspol
umod_test_dane := tlspol
umod_test_shape := shape
umod_test_cluster := cluster
umod_test_milter := milter
umod_test_events := events
BENCH_SRC  := $(wildcard bench/*.c)
BENCH_BIN  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
umod_router_bench := router
umod_scan_bench := smtp
umod_spool_bench := spool
umod_bigqueue_fill := spool
umod_smtpblast := common
umod_smtpsink := common
umod_dkim_sign_bench := dkim
umod_tlsblast := common

.SECONDARY:
.PHONY: all deps run test unit integration asan bench bench-tls bench-dkim bench-milter fuzz soak install clean layering size deb
all: $(BUILD)/mtad $(BUILD)/mtactl $(BUILD)/mtad-sendmail $(BENCH_BIN)
	@:

# Installs what a fresh Debian 12 lacks (nothing when all is there).
# make run and make test call it, then build in a new make, which reads
# pkg-config's flags after the install.
deps:
	@sh packaging/deps.sh

$(patsubst %,$(BUILD)/%.o,$(VERSION_USERS)): VERSION
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<


$(BUILD)/lib/lib%.a:
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/mtad: $(BUILD)/master/main.o $(call libs,master)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# mtactl's objects cannot live in $(BUILD)/mtactl/: that is the binary.
MTACTL_OBJ := $(patsubst mtactl/%.c,$(BUILD)/obj-mtactl/%.o,$(MTACTL_SRC))
$(BUILD)/obj-mtactl/%.o: mtactl/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/mtactl: $(MTACTL_OBJ) $(call libs,$(deps_mtactl))
	@if [ -d $@ ]; then rm -rf $@; fi
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# mtad-sendmail: a program using only common and config (deps_sendmail).
SENDMAIL_OBJ := $(patsubst sendmail/%.c,$(BUILD)/obj-sendmail/%.o,$(wildcard sendmail/*.c))
$(BUILD)/obj-sendmail/%.o: sendmail/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/mtad-sendmail: $(SENDMAIL_OBJ) $(call libs,$(deps_sendmail))
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

.SECONDEXPANSION:
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $$(call libs,$$(umod_$$*))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CRIT_LIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $$(call libs,$$(umod_$$*))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Integration tests use the binaries in $(BUILD); unit tests come first.
test: deps
	@$(MAKE) --no-print-directory all layering size $(UNIT_BIN)
	@sh tests/run-unit.sh $(UNIT_BIN)
	@MTAD_BUILD=$(BUILD) sh tests/run-integration.sh

# Fails when a file includes a header, or an object calls a function, of
# a module its own may not use (the graph: mk/modules.mk).
layering: $(foreach m,$(MODS),$(BUILD)/lib/lib$(m).a) $(BUILD)/master/main.o \
          $(MTACTL_OBJ) $(SENDMAIL_OBJ)
	@sh tests/layering.sh . $(BUILD)

# Fails when a C file outside tests/ is over 1,000 lines.
size:
	@sh tests/size.sh .
	@sh tests/conventions.sh .

unit: $(UNIT_BIN)
	@sh tests/run-unit.sh $(UNIT_BIN)

integration: all
	@MTAD_BUILD=$(BUILD) sh tests/run-integration.sh

# The same tests on an ASan+UBSan build, in build-asan/.
# The bench tools' own tests (test_bench_tools.py) run in `make test` only:
# under ASan they would check smtpblast and smtpsink, not mtad, and CI has
# a 15-minute budget.
asan:
	MTAD_TEST_SKIP="test_bench_tools.py" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

# libFuzzer targets (clang) for every parser of untrusted input, built into
# build-fuzz/ and run FUZZ_TIME seconds each from the seeds committed in
# tests/fuzz/corpus/<target>/ (tests/fuzz/run.sh; a crash fails the run).
FUZZ_CC      ?= clang
FUZZ_TIME    ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_FLAGS    = -g -O1 -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FUZZ_TARGETS := smtp stuff relay env route config dns proxy dkim sts tlsrpt wire \
                auth dsn stsd metrics sendmail routeline control chan bclass \
                milter sasl dovecot
# Each target links the module it fuzzes and what that module uses.
fmod_smtp := smtp
fmod_stuff := smtp
fmod_relay := smtp
fmod_env := spool
fmod_wire := spool
fmod_route := router
fmod_config := config
fmod_dns := dns
fmod_proxy := proxy
fmod_dkim := dkim
fmod_tlsrpt := tlspol
fmod_sts := sts
fmod_auth := smtpd
fmod_dsn := delivery
fmod_stsd := delivery
fmod_chan := common
fmod_bclass := bclass
fmod_milter := milter
fmod_sasl := sasl
fmod_dovecot := smtpd
# A parser inside a program or a big module: its own file (fsrc_T) and the
# modules it uses.
fsrc_metrics := master/metrics_req.c
fsrc_sendmail := sendmail/scan.c
fmod_sendmail := common
fmod_routeline := router
fsrc_control := master/ctl_req.c
fmod_control := spool
fsrc = $(fsrc_$(1)) $(foreach m,$(fmod_$(1)) $(deps_$(fmod_$(1))),$(SRC_$(m)))
# Each source is compiled once (with the fuzzer's coverage, not its main)
# into build-fuzz/obj/ and linked into every target that uses it.
fobj = $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(call fsrc,$(1)))
FUZZ_BIN     := $(patsubst %,$(FUZZ_BUILD)/fuzz_%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

define FUZZ_RULE
$(FUZZ_BUILD)/fuzz_$(1): tests/fuzz/fuzz_$(1).c $$(call fobj,$(1))
	@mkdir -p $(FUZZ_BUILD)
	$$(FUZZ_CC) $$(FUZZ_FLAGS) -fsanitize=fuzzer -o $$@ $$^ $$(LDLIBS)
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call FUZZ_RULE,$(t))))

fuzz: $(FUZZ_BIN)
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_TIME) $(FUZZ_TARGETS)

# make run: mtad in the foreground on var/run.yaml, which is CONFIG with
# two keys set (mk/runconf.sh), so that neither needs an edit of the
# tracked relay.yaml and checkouts on one machine do not meet:
#   CONFIG=FILE  the configuration (default relay.yaml; e.g. an untracked
#                copy of it: var/ and *.local.yaml are ignored by git);
#   PORT=N       server.listen becomes ["127.0.0.1:N"] (default: CONFIG's);
#   SPOOL=DIR    spool.dir (default /dev/shm/mtad-<checkout>/spool, one per
#                checkout, on the RAM disk).  mtad creates its missing
#                parents root's and 0755: as root it refuses a spool whose
#                parent the workers' user could change (docs/SECURITY.md).
# mtactl reaches it with: build/mtactl -c var/run.yaml ...
# As root, workers run as the system user mtad (created here if missing),
# so the Maildir under var/ must be theirs; var/ itself (pid file, control
# socket, routes, run.yaml) stays root's: mtad refuses them in a directory
# the workers could change.
CONFIG = relay.yaml
PORT   =
SPOOL  = /dev/shm/mtad-$(shell printf '%s' '$(CURDIR)' | cksum | cut -d' ' -f1)/spool
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p var/Maildir
	@if [ "$$(id -u)" = 0 ]; then \
	    id mtad >/dev/null 2>&1 || { echo "run: creating system user mtad"; \
	        useradd --system --no-create-home --shell /usr/sbin/nologin mtad; }; \
	    chown root:root var && chmod 0755 var && chown mtad:mtad var/Maildir; fi
	@sh mk/runconf.sh '$(CONFIG)' '$(SPOOL)' '$(PORT)' > var/run.yaml.new && \
	    mv var/run.yaml.new var/run.yaml
	@echo "run: var/run.yaml: $(CONFIG) with spool.dir $(SPOOL)$(if $(PORT), and listen 127.0.0.1:$(PORT))"
	$(BUILD)/mtad -f -c var/run.yaml

bench: all
	@sh bench/run.sh

# Opt-in: mtad's inbound STARTTLS rows (bench/tls_bench.py), apart from
# `make bench` so that its time does not grow.
bench-tls: all
	@/usr/bin/python3 bench/tls_bench.py

# Opt-in: DKIM signing on/off, mtad and Postfix + OpenDKIM (bench/dkim_bench.py;
# bench/deps installs postfix and opendkim with their services kept down).
bench-dkim: all
	@sh bench/deps && /usr/bin/python3 bench/dkim_bench.py

# Opt-in: rspamd as a milter, mtad and Postfix asking the same rspamd
# (bench/milter.py; bench/deps installs postfix and rspamd, services down).
bench-milter: all
	@sh bench/deps && /usr/bin/python3 bench/milter.py

# The chaos soak (tests/soak/soak.py): clients, a misbehaving next hop and
# a seeded fault injector for DURATION seconds; fails on any lost, phantom
# or corrupted message or unexplained duplicate.  Root: tmpfs spool, ENOSPC.
DURATION ?= 120
soak: all
	@MTAD_BUILD=$(BUILD) /usr/bin/python3 tests/soak/soak.py --duration $(DURATION) $(SOAK_ARGS)

install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)/etc/mtad \
	    $(DESTDIR)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/man/man8 \
	    $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 0755 $(BUILD)/mtad $(BUILD)/mtactl $(BUILD)/mtad-sendmail $(DESTDIR)$(PREFIX)/sbin/
	install -m 0644 packaging/relay.yaml.example $(DESTDIR)/etc/mtad/relay.yaml.example
	install -m 0644 packaging/bounce-classes.conf $(DESTDIR)/etc/mtad/bounce-classes.conf.example
	install -d $(DESTDIR)/etc/logrotate.d
	install -m 0644 packaging/logrotate/mtad $(DESTDIR)/etc/logrotate.d/mtad
	install -d $(DESTDIR)/usr/lib/sysusers.d $(DESTDIR)/usr/lib/tmpfiles.d
	install -m 0644 packaging/systemd/mtad.sysusers $(DESTDIR)/usr/lib/sysusers.d/mtad.conf
	install -m 0644 packaging/systemd/mtad.tmpfiles $(DESTDIR)/usr/lib/tmpfiles.d/mtad.conf
	sed 's|@SBINDIR@|$(PREFIX)/sbin|g' packaging/systemd/mtad.service \
	    > $(DESTDIR)/lib/systemd/system/mtad.service
	-install -m 0644 docs/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/ 2>/dev/null
	-install -m 0644 docs/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/ 2>/dev/null

# A Debian package (build/mtad_<version>_<arch>.deb); tests/deb/test_deb.sh
# installs it, sends a message through it and purges it.  build.sh runs
# make install: "+" hands it this make's jobs.
deb: all
	+@sh packaging/deb/build.sh $(BUILD)

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
