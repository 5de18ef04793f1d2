# make [PREFIX=/usr/local] [DESTDIR=] install — builds in release mode and installs audiod and audioctl, the systemd
# user unit, the D-Bus activation file, the interface XML (generated from the code), the man pages in man/, audioctl's
# shell completions (bash, zsh, fish) and an example config.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
# systemd looks for user units under <prefix>/lib/systemd/user.
USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SWIFT ?= swift
# The standard library linked in statically: audiod's resident size 14.7 MB instead of 18.2 MB (shared Swift
# runtime libraries are mapped whole; docs/BENCHMARKS.md). The same flags as scripts/setup.sh's, warnings as errors
# included: SwiftPM rebuilds everything when the flags differ, so `make` after `scripts/run` (or the other way
# round) would build it all again.
RELEASE ?= -c release --static-swift-stdlib -Xswiftc -warnings-as-errors

.PHONY: build install uninstall test run
build:
	$(SWIFT) build $(RELEASE) --product audiod
	$(SWIFT) build $(RELEASE) --product audioctl

install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(DATADIR)/dbus-1/services \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces $(DESTDIR)$(DATADIR)/doc/audiod $(DESTDIR)$(DATADIR)/man/man1 $(DESTDIR)$(DATADIR)/man/man5 \
		$(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	install -m 755 "$$($(SWIFT) build $(RELEASE) --show-bin-path)/audiod" $(DESTDIR)$(BINDIR)/audiod
	install -m 755 "$$($(SWIFT) build $(RELEASE) --show-bin-path)/audioctl" $(DESTDIR)$(BINDIR)/audioctl
	install -m 644 man/audiod.1 man/audioctl.1 $(DESTDIR)$(DATADIR)/man/man1/
	install -m 644 man/audiod.toml.5 $(DESTDIR)$(DATADIR)/man/man5/
	# bash-completion sources the file: it is not a script of its own, so no #! line.
	"$$($(SWIFT) build $(RELEASE) --show-bin-path)/audioctl" --generate-completion-script bash | sed '1{/^#!/d}' \
		> $(DESTDIR)$(DATADIR)/bash-completion/completions/audioctl
	"$$($(SWIFT) build $(RELEASE) --show-bin-path)/audioctl" --generate-completion-script zsh \
		> $(DESTDIR)$(DATADIR)/zsh/site-functions/_audioctl
	"$$($(SWIFT) build $(RELEASE) --show-bin-path)/audioctl" --generate-completion-script fish \
		> $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/audioctl.fish
	sed 's|@bindir@|$(BINDIR)|g' systemd/audiod.service.in > $(DESTDIR)$(USERUNITDIR)/audiod.service
	sed 's|@bindir@|$(BINDIR)|g' systemd/org.audiod.AudioSession1.service.in \
		> $(DESTDIR)$(DATADIR)/dbus-1/services/org.audiod.AudioSession1.service
	"$$($(SWIFT) build $(RELEASE) --show-bin-path)/audiod" --dump-interfaces $(DESTDIR)$(DATADIR)/dbus-1/interfaces
	install -m 644 examples/audiod.toml $(DESTDIR)$(DATADIR)/doc/audiod/audiod.toml.example

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/audiod $(DESTDIR)$(BINDIR)/audioctl $(DESTDIR)$(USERUNITDIR)/audiod.service \
		$(DESTDIR)$(DATADIR)/man/man1/audiod.1 $(DESTDIR)$(DATADIR)/man/man1/audioctl.1 \
		$(DESTDIR)$(DATADIR)/man/man5/audiod.toml.5 \
		$(DESTDIR)$(DATADIR)/bash-completion/completions/audioctl $(DESTDIR)$(DATADIR)/zsh/site-functions/_audioctl \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/audioctl.fish \
		$(DESTDIR)$(DATADIR)/dbus-1/services/org.audiod.AudioSession1.service \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.audiod.AudioSession1.Manager.xml \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.audiod.AudioSession1.Session.xml \
		$(DESTDIR)$(DATADIR)/doc/audiod/audiod.toml.example

test:
	bash scripts/test

run:
	bash scripts/run
