# mtad - non-recursive GNU make.  Objects go to build/ (or build-asan/).
# Targets: all (mtad, mtactl), deps, run, test, unit, integration, asan,
#          bench, install, clean.

PKGS     := openssl lmdb yaml-0.1 libseccomp
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
CC       ?= cc
OPT      ?= -O2 -g
SAN      ?=
CFLAGS_W := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CPPFLAGS += -I. -D_GNU_SOURCE -MMD -MP
CFLAGS   += -std=c11 $(OPT) $(SAN) $(CFLAGS_W) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LDFLAGS  += $(SAN)
CRIT_LIBS = $(shell pkg-config --libs criterion 2>/dev/null)

# Library objects by module.  master/main.c and mtactl/mtactl.c hold main().
COMMON_SRC := $(wildcard common/*.c)
CONFIG_SRC := $(wildcard config/*.c)
SPOOL_SRC  := $(wildcard spool/*.c)
ROUTER_SRC := $(wildcard router/*.c)
WORKER_SRC := $(wildcard worker/*.c)
MASTER_SRC := $(filter-out master/main.c,$(wildcard master/*.c))
MTACTL_SRC := $(wildcard mtactl/*.c)
obj = $(patsubst %.c,$(BUILD)/%.o,$(1))

BASE_OBJ   := $(call obj,$(COMMON_SRC) $(CONFIG_SRC) $(SPOOL_SRC) $(ROUTER_SRC))
WORKER_OBJ := $(call obj,$(WORKER_SRC))
MASTER_OBJ := $(call obj,$(MASTER_SRC))
LIB        := $(BUILD)/libmtad.a

UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
BENCH_SRC  := $(wildcard bench/*.c)
BENCH_BIN  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.SECONDARY:
.PHONY: all deps run test unit integration asan bench install clean check-deps
all: check-deps $(BUILD)/mtad $(BUILD)/mtactl $(BENCH_BIN)

# Installs what a fresh Debian 12 lacks; make run / make test call it when
# pkg-config cannot find a library.
deps:
	@sh packaging/deps.sh

check-deps:
	@pkg-config --exists $(PKGS) criterion 2>/dev/null || sh packaging/deps.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(LIB): $(BASE_OBJ) $(WORKER_OBJ) $(MASTER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/mtad: $(BUILD)/master/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# mtactl's objects cannot live in $(BUILD)/mtactl/: that is the binary.
MTACTL_OBJ := $(patsubst mtactl/%.c,$(BUILD)/obj-mtactl/%.o,$(MTACTL_SRC))
$(BUILD)/obj-mtactl/%.o: mtactl/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/mtactl: $(MTACTL_OBJ) $(LIB)
	@if [ -d $@ ]; then rm -rf $@; fi
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CRIT_LIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Integration tests use the binaries in $(BUILD); unit tests come first.
test: all $(UNIT_BIN)
	@sh tests/run-unit.sh $(UNIT_BIN)
	@MTAD_BUILD=$(BUILD) sh tests/run-integration.sh

unit: check-deps $(UNIT_BIN)
	@sh tests/run-unit.sh $(UNIT_BIN)

integration: all
	@MTAD_BUILD=$(BUILD) sh tests/run-integration.sh

# The same tests on an ASan+UBSan build, in build-asan/.
asan:
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

# As root, workers run as the system user mtad (created here if missing),
# so the Maildir under var/ must be theirs; var/ itself (pid file, control
# socket, routes) stays root's: mtad refuses them in a directory the
# workers could change.
run: all
	@mkdir -p var/Maildir
	@if [ "$$(id -u)" = 0 ]; then \
	    id mtad >/dev/null 2>&1 || { echo "run: creating system user mtad"; \
	        useradd --system --no-create-home --shell /usr/sbin/nologin mtad; }; \
	    chown root:root var && chmod 0755 var && chown mtad:mtad var/Maildir; fi
	$(BUILD)/mtad -f -c relay.yaml

bench: all
	@sh bench/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)/etc/mtad \
	    $(DESTDIR)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/man/man8 \
	    $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 0755 $(BUILD)/mtad $(BUILD)/mtactl $(DESTDIR)$(PREFIX)/sbin/
	install -m 0644 packaging/relay.yaml.example $(DESTDIR)/etc/mtad/relay.yaml.example
	install -d $(DESTDIR)/usr/lib/sysusers.d $(DESTDIR)/usr/lib/tmpfiles.d
	install -m 0644 packaging/systemd/mtad.sysusers $(DESTDIR)/usr/lib/sysusers.d/mtad.conf
	install -m 0644 packaging/systemd/mtad.tmpfiles $(DESTDIR)/usr/lib/tmpfiles.d/mtad.conf
	sed 's|@SBINDIR@|$(PREFIX)/sbin|g' packaging/systemd/mtad.service \
	    > $(DESTDIR)/lib/systemd/system/mtad.service
	-install -m 0644 docs/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/ 2>/dev/null
	-install -m 0644 docs/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/ 2>/dev/null

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
