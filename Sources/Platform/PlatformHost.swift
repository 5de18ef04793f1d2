import AudioPolicy

/// What the platform needs from the daemon: the engine's read model and its step. The platform's outputs are engine
/// events; its inputs are the effects of every step (`Platform.carryOut`).
public protocol PlatformHost: AnyObject {
    /// The engine's read model.
    var engine: Engine { get }
    /// One engine step.
    @discardableResult func handle(_ event: Event) -> [Effect]
}
