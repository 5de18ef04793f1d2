import AudioPolicy

/// The rules of an MPRIS player's look-up (GetNameOwner → GetConnectionUnixProcessID → Get PlaybackStatus), with no
/// bus: `MPRISWatcher` makes the calls and asks this value what each answer still counts for. A name can change
/// owner while its look-up runs; every answer counts only for the owner it was asked of, so that a newcomer never
/// gets the dead owner's pid and an old owner's failure never ends the newcomer's look-up. A status the owner
/// signals meanwhile wins over the Get's answer: a player can answer Get from a state that lags its own signal
/// (Firefox announces `Playing` while audiod still asks for its pid).
struct PlayerLookups {
    private struct Lookup {
        var unique: String?
        var signalled: PlaybackStatus?
        /// The Flatpak app id of its owner's process, once its pid is known.
        var app: String?
    }
    private var pending: [String: Lookup] = [:]

    var count: Int { pending.count }
    func isLookingUp(_ name: String) -> Bool { pending[name] != nil }
    /// Whether `unique` is the owner of a name being looked up (its signals are followed from then on).
    func follows(_ unique: String) -> Bool { pending.values.contains { $0.unique == unique } }
    /// How many names of the connection `unique` are being looked up.
    func owned(by unique: String) -> Int { pending.values.count { $0.unique == unique } }

    /// How many look-ups go on for names of the sandboxed app `app`, besides `name`'s.
    func owned(byApp app: String, besides name: String) -> Int {
        pending.count { $0.key != name && $0.value.app == app }
    }

    /// The owner of `name`'s look-up is a process of the sandboxed app `app`.
    mutating func owner(of name: String, isOf app: String) { pending[name]?.app = app }

    /// A look-up starts; `owner` when NameOwnerChanged said it, nil when GetNameOwner must ask.
    mutating func begin(_ name: String, owner: String?) { pending[name] = Lookup(unique: owner) }

    /// GetNameOwner answered `unique` (nil: no owner). True when the look-up goes on with it: only a look-up that
    /// still waits for that answer takes it (one begun since, for a new owner, knows its owner already).
    mutating func ownerAnswered(_ name: String, _ unique: String?) -> Bool {
        guard let lookup = pending[name], lookup.unique == nil else { return false }
        guard let unique else {
            pending[name] = nil
            return false
        }
        pending[name]?.unique = unique
        return true
    }

    /// Whether an answer asked of `unique` still counts for `name`'s look-up.
    func isCurrent(_ name: String, _ unique: String) -> Bool { pending[name]?.unique == unique }

    /// The pid question asked of `unique` failed: the look-up ends, if it is still that owner's.
    mutating func failed(_ name: String, _ unique: String) {
        if isCurrent(name, unique) { pending[name] = nil }
    }

    /// The owner `unique` signalled `status` during a look-up; the names it was for.
    mutating func signalled(_ unique: String, _ status: PlaybackStatus) -> [String] {
        let names = pending.filter { $0.value.unique == unique }.map(\.key).sorted()
        for n in names { pending[n]?.signalled = status }
        return names
    }

    /// The Get answered `read` (nil: no status): the player's status, and the look-up done — or nil when the answer
    /// no longer counts (the name changed owner, or went).
    mutating func finish(_ name: String, _ unique: String, read: PlaybackStatus?) -> PlaybackStatus? {
        guard isCurrent(name, unique), let lookup = pending.removeValue(forKey: name) else { return nil }
        return lookup.signalled ?? read ?? .stopped
    }

    /// The name lost its owner: its look-up ends.
    mutating func vanished(_ name: String) { pending[name] = nil }
    /// The names whose look-up goes on with the connection `unique`.
    func names(ownedBy unique: String) -> [String] { pending.filter { $0.value.unique == unique }.map(\.key) }
}
