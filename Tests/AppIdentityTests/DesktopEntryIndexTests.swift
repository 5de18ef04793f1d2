import Foundation
import Glibc
import Testing

@testable import AppIdentity

/// The desktop entry index as the desktop changes under it: real directories and real inotify in a temporary tree,
/// and an injected queue overflow.
@Suite struct DesktopEntryIndexTests {
    let tree: String

    init() throws {
        tree = FileManager.default.temporaryDirectory.appendingPathComponent("index-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
    }

    func write(_ path: String, categories: String = "Game;") throws {
        let id = (path as NSString).lastPathComponent
        try "[Desktop Entry]\nType=Application\nName=\(id)\nExec=/usr/bin/\(id)-prog\nCategories=\(categories)\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
    }

    func mkdir(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    }

    @Test func aDataDirectoryMadeAfterTheIndexStartedIsFollowedDownAsItIsMade() throws {
        defer { try? FileManager.default.removeItem(atPath: tree) }
        // A fresh account: no ~/.local/share at all yet.
        let share = tree + "/home/.local/share"
        let apps = share + "/applications"
        try FileManager.default.createDirectory(atPath: tree + "/home", withIntermediateDirectories: true)
        let index = DesktopEntryIndex(directories: [apps])
        #expect(index.count == 0)
        try mkdir(tree + "/home/.local")
        index.refresh()
        try mkdir(share)
        index.refresh()
        try mkdir(apps)
        index.refresh()
        try write(apps + "/org.example.NewGame.desktop")
        #expect(index.refresh())
        #expect(index.entry(id: "org.example.NewGame")?.isGame == true, "a game installed after start")
        // Made in one go (mkdir -p and the file before the index looks): found all the same.
        let flatpak = tree + "/flatpak/exports/share/applications"
        let late = DesktopEntryIndex(directories: [flatpak])
        try FileManager.default.createDirectory(atPath: flatpak, withIntermediateDirectories: true)
        try write(flatpak + "/org.example.Flat.desktop")
        late.refresh()
        #expect(late.entry(id: "org.example.Flat") != nil)
    }

    @Test func aDirectoryRemovedAndMadeAgainIsFollowedAgain() throws {
        defer { try? FileManager.default.removeItem(atPath: tree) }
        let apps = tree + "/applications"
        try mkdir(apps)
        try write(apps + "/one.desktop")
        let index = DesktopEntryIndex(directories: [apps])
        #expect(index.entry(id: "one") != nil)
        try FileManager.default.removeItem(atPath: apps)
        index.refresh()
        #expect(index.entry(id: "one") == nil, "its entries went with it")
        try mkdir(apps)
        index.refresh()
        try write(apps + "/two.desktop")
        index.refresh()
        #expect(index.entry(id: "two") != nil)
        // Moved away (to the trash, a rename) with a subdirectory in it, and made again: neither the moved
        // directory nor its subdirectory's watch is taken for the path.
        try mkdir(apps + "/wine")
        index.refresh()
        try write(apps + "/wine/notepad.desktop")
        index.refresh()
        #expect(index.entry(id: "wine-notepad") != nil)
        try FileManager.default.moveItem(atPath: apps, toPath: tree + "/old")
        index.refresh()
        #expect(index.entry(id: "two") == nil)
        try mkdir(apps)
        try write(apps + "/three.desktop")
        index.refresh()
        try write(apps + "/four.desktop")
        try mkdir(apps + "/wine")
        index.refresh()
        try write(apps + "/wine/regedit.desktop")
        index.refresh()
        #expect(index.entry(id: "three") != nil && index.entry(id: "four") != nil)
        #expect(index.entry(id: "wine-regedit") != nil, "the re-made subdirectory is not followed")
    }

    @Test func aDirectorySymlinkIsNeverWalkedAndAnEntrySymlinkIsRead() throws {
        defer { try? FileManager.default.removeItem(atPath: tree) }
        let apps = tree + "/applications"
        let outside = tree + "/outside"
        let store = tree + "/store/app/org.example.Linked/export"
        try mkdir(apps)
        try mkdir(outside)
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try write(outside + "/stray.desktop")
        try write(store + "/org.example.Linked.desktop")
        try FileManager.default.createSymbolicLink(atPath: apps + "/out", withDestinationPath: outside)
        // A loop, as a careless link makes one.
        try FileManager.default.createSymbolicLink(atPath: apps + "/loop", withDestinationPath: apps)
        // Flatpak exports its entries as symlinks into the app's directory.
        try FileManager.default.createSymbolicLink(
            atPath: apps + "/org.example.Linked.desktop", withDestinationPath: store + "/org.example.Linked.desktop")
        let index = DesktopEntryIndex(directories: [apps])
        #expect(index.entry(id: "out-stray") == nil, "a directory symlink was walked")
        #expect(index.entry(id: "loop-org.example.Linked") == nil, "a loop was walked")
        #expect(index.entry(id: "org.example.Linked") != nil, "an entry symlink is read through")
        // A data directory that is itself a symlink (a NixOS profile) is read where it leads.
        let profile = tree + "/profile-apps"
        try FileManager.default.createSymbolicLink(atPath: profile, withDestinationPath: outside)
        #expect(DesktopEntryIndex(directories: [profile]).entry(id: "stray") != nil)
    }

    @Test func anOverflowIsOneFullRescanAndABurstIsOneRead() throws {
        defer { try? FileManager.default.removeItem(atPath: tree) }
        let apps = tree + "/applications"
        try mkdir(apps)
        let index = DesktopEntryIndex(directories: [apps])
        let before = index.scans
        for i in 0..<1_000 { try write(apps + "/burst\(i).desktop", categories: "Utility;") }
        #expect(index.refresh())
        #expect(index.scans == before + 1, "a burst of 1,000 creates was read \(index.scans - before) times")
        #expect(index.count == 1_000)
        // Events lost to a full queue: the one rescan finds what they would have said.
        try write(apps + "/unseen.desktop")
        let overflow: [(wd: Int32, mask: UInt32)] = [(wd: -1, mask: UInt32(IN_Q_OVERFLOW))]
        let rescanned = index.handle(overflow)
        #expect(rescanned)
        #expect(index.overflows == 1)
        #expect(index.entry(id: "unseen") != nil)
        // Deletes give the stamps' room back.
        for i in 0..<1_000 { try FileManager.default.removeItem(atPath: apps + "/burst\(i).desktop") }
        index.refresh()
        #expect(index.count == 1)
        #expect(index.stampCount == 1)
    }
}
