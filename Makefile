# make [PREFIX=/usr/local] [DESTDIR=] install — builds in release mode and installs audiod, its systemd user unit,
# its D-Bus activation file, the interface XML (generated from the code) and an example config.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
# systemd looks for user units under <prefix>/lib/systemd/user.
USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SWIFT ?= swift

.PHONY: build install uninstall test run
build:
	$(SWIFT) build -c release --product audiod

install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(DATADIR)/dbus-1/services \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces $(DESTDIR)$(DATADIR)/doc/audiod
	install -m 755 "$$($(SWIFT) build -c release --show-bin-path)/audiod" $(DESTDIR)$(BINDIR)/audiod
	sed 's|@bindir@|$(BINDIR)|g' systemd/audiod.service.in > $(DESTDIR)$(USERUNITDIR)/audiod.service
	sed 's|@bindir@|$(BINDIR)|g' systemd/org.audiod.AudioSession1.service.in \
		> $(DESTDIR)$(DATADIR)/dbus-1/services/org.audiod.AudioSession1.service
	"$$($(SWIFT) build -c release --show-bin-path)/audiod" --dump-interfaces $(DESTDIR)$(DATADIR)/dbus-1/interfaces
	install -m 644 examples/audiod.toml $(DESTDIR)$(DATADIR)/doc/audiod/audiod.toml.example

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/audiod $(DESTDIR)$(USERUNITDIR)/audiod.service \
		$(DESTDIR)$(DATADIR)/dbus-1/services/org.audiod.AudioSession1.service \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.audiod.AudioSession1.Manager.xml \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.audiod.AudioSession1.Session.xml \
		$(DESTDIR)$(DATADIR)/doc/audiod/audiod.toml.example

test:
	bash scripts/test

run:
	bash scripts/run
